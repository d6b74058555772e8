/* Kohaku-TT's simulator core for programs built against the host kernel API: the C API the Python package loads
 * with cffi (kohakutt/hal/backends/sim_native.py). One call runs a whole program: every kernel of every core as a
 * thread over the simulated cores' L1, circular buffers, NOC, semaphores and tile registers.
 *
 * The block between KTT_CDEF_BEGIN and KTT_CDEF_END is handed to cffi's cdef: plain declarations only.
 */
#ifndef KTT_SIM_H
#define KTT_SIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KTT_CDEF_BEGIN */
/* A device buffer the program runs over: its pages go round `banks` banks (DRAM or L1) from bank address
 * `address`, page p in bank p % banks at address + (p / banks) * page_stride; `data` holds its nbytes, pages in
 * order. */
typedef struct {
    uint64_t address;
    uint64_t bank_bytes;
    uint64_t nbytes;
    uint32_t page_size;
    uint32_t page_stride;
    uint32_t banks;
    int32_t dram;
    void *data;
} ktt_sim_buffer;

/* A circular buffer of one core: `format` is TT-Metal's DataFormat code, `address` its L1 offset. */
typedef struct {
    int32_t index;
    int32_t format;
    uint32_t page_size;
    uint32_t num_pages;
    uint32_t address;
} ktt_sim_cb;

typedef struct {
    int32_t id;
    uint32_t address;
    uint32_t initial_value;
} ktt_sim_semaphore;

/* A kernel on one core: kind 0 reader (BRISC), 1 writer (NCRISC), 2 compute (TRISCs); `entry` is the built
 * kernel's ktt_kernel_entry. The compute config: fidelity phases (1 LoFi .. 4 HiFi4), fp32 DST, approx mode and
 * the tiles DST holds (half / full sync already applied). */
typedef struct {
    const char *name;
    const char *source;
    int32_t kind;
    void *entry;
    const uint32_t *args;
    uint32_t num_args;
    const uint32_t *common_args;
    uint32_t num_common_args;
    int32_t fidelity_phases;
    int32_t fp32_dest_acc;
    int32_t approx;
    int32_t dst_tiles;
} ktt_sim_kernel;

typedef struct {
    int32_t x;
    int32_t y;
    const ktt_sim_cb *cbs;
    int32_t num_cbs;
    const ktt_sim_semaphore *semaphores;
    int32_t num_semaphores;
    const ktt_sim_kernel *kernels;
    int32_t num_kernels;
} ktt_sim_core;

/* The card and the run: grid, L1 size, bank counts, NOC alignments (DRAM read / write, L1), the runtime-argument
 * limit per kernel and core, how long a kernel may spin without any state change before the run reports a stall,
 * and whether the cores run together (`concurrent`: they share semaphores) or one after another. */
typedef struct {
    const char *program;
    int32_t grid_x;
    int32_t grid_y;
    uint32_t l1_bytes;
    uint32_t dram_banks;
    uint32_t l1_banks;
    uint32_t dram_read_align;
    uint32_t dram_write_align;
    uint32_t l1_align;
    uint32_t max_runtime_args;
    double stall_seconds;
    int32_t concurrent;
} ktt_sim_run_desc;

int ktt_sim_version(void);

/* Runs the program; returns 0, or -1 with a ProgramError message (naming the kernel, the call, the core and the
 * kernel's file and line) in `error`. */
int ktt_sim_run(const ktt_sim_run_desc *run, const ktt_sim_buffer *buffers, int32_t num_buffers,
                const ktt_sim_core *cores, int32_t num_cores, char *error, size_t error_len);
/* KTT_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KTT_SIM_H */
