// Kohaku-TT's host build of the TT-Metal 0.81.1 kernel API: what the API headers call into.
//
// A kernel compiled against these headers runs on the CPU inside the simulator (native/kernel_api/sim): each API
// call lands in one of the functions below, which act on the simulated core's L1, circular buffers, NOC, semaphores
// and tile registers with the card's numerics, and check the card's rules. A broken rule ends the kernel with a
// ProgramError that names the kernel, the call, the core and the kernel's file and line (`Site`).
//
// L1 addresses a kernel sees are real host addresses of the core's simulated L1 (mapped below 4 GiB so they fit the
// API's uint32_t), so kernels dereference them as on the card.
#pragma once

#include <cstddef>
#include <cstdint>

#define KTT_HOST_BUILD 1
#define FORCE_INLINE inline __attribute__((always_inline))
#define ALWI inline __attribute__((always_inline))
#define tt_l1_ptr
#define tt_reg_ptr
#define KTT_SITE const char *ktt_file_ = __builtin_FILE(), int ktt_line_ = __builtin_LINE()
#define KTT_HERE (::ktt::host::Site{ktt_file_, ktt_line_})

// Blackhole's figures, as tt_metal/hw/inc/internal/tt-1xx/blackhole/noc/noc_parameters.h defines them.
#define NUM_NOCS 2
#define NOC_MAX_BURST_SIZE (256 * 64)
#define NOC_L1_READ_ALIGNMENT_BYTES 16
#define NOC_L1_WRITE_ALIGNMENT_BYTES 16
#define NOC_DRAM_READ_ALIGNMENT_BYTES 64
#define NOC_DRAM_WRITE_ALIGNMENT_BYTES 16
#define L1_ALIGNMENT 16
#define DRAM_ALIGNMENT 64
#define NOC_UNICAST_WRITE_VC 1
#define NOC_MULTICAST_WRITE_VC 4

enum class DataFormat : std::uint8_t {
    Float32 = 0,
    Float16 = 1,
    Bfp8 = 2,
    Bfp4 = 3,
    Tf32 = 4,
    Float16_b = 5,
    Bfp8_b = 6,
    Bfp4_b = 7,
    Int32 = 8,
    UInt16 = 9,
    Lf8 = 10,
    Bfp2 = 11,
    Int8 = 14,
    Bfp2_b = 15,
    UInt32 = 24,
    UInt8 = 30,
    Invalid = 0xff
};

namespace ktt::host {

struct Site {
    const char *file;
    int line;
};

// ---- arguments
uint32_t arg_addr(int index, bool common, Site at);
uint8_t my_coord(int axis);  // 0: x, 1: y (logical)

// ---- circular buffers
void cb_reserve_back(int32_t cb, int32_t pages, Site at);
void cb_push_back(int32_t cb, int32_t pages, Site at);
void cb_wait_front(int32_t cb, int32_t pages, Site at);
void cb_pop_front(int32_t cb, int32_t pages, Site at);
bool cb_pages_reservable_at_back(int32_t cb, int32_t pages, Site at);
bool cb_pages_available_at_front(int32_t cb, int32_t pages, Site at);
uint32_t cb_write_ptr(uint32_t cb, Site at);
uint32_t cb_read_ptr(uint32_t cb, Site at);
uint32_t cb_tile_size(int32_t cb, Site at);
DataFormat cb_format(int32_t cb, Site at);

// ---- the NOC. Addresses are encoded by the functions below; kernels only add offsets to them.
uint64_t noc_core_addr(uint32_t x, uint32_t y, uint32_t l1_addr, Site at);
uint64_t noc_local_addr(uint32_t l1_addr, Site at);
uint64_t noc_multicast_addr(uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1, uint32_t l1_addr, Site at);
uint64_t noc_bank_addr(bool dram, uint32_t bank, uint32_t addr, Site at);
uint32_t num_banks(bool dram);
uint32_t bank_alignment(bool dram);
void noc_read(uint64_t src, uint32_t dst_l1, uint32_t size, const char *call, Site at);
void noc_write(uint32_t src_l1, uint64_t dst, uint32_t size, const char *call, Site at);
void noc_write_multicast(uint32_t src_l1, uint64_t dst, uint32_t size, uint32_t num_dests, bool loopback,
                         const char *call, Site at);
void noc_barrier(int what, Site at);  // 1 reads, 2 writes flushed, 4 writes acked, 8 atomics
void noc_inline_write(uint64_t dst, uint32_t value, Site at);

// ---- semaphores
uint32_t semaphore_addr(uint32_t id, Site at);
void semaphore_wait(volatile uint32_t *addr, uint32_t value, bool at_least, Site at);
void semaphore_set(volatile uint32_t *addr, uint32_t value, Site at);
void semaphore_inc(uint64_t dst, uint32_t incr, Site at);
void semaphore_set_remote(uint32_t src_l1, uint64_t dst, Site at);
void semaphore_set_multicast(uint32_t src_l1, uint64_t dst, uint32_t num_dests, bool loopback, Site at);

// ---- compute: DST handshakes, inits, FPU / SFPU ops, pack
enum class Regs { Acquire, Commit, Wait, Release, AcquireFull, ReleaseFull };  // *Full: acquire_dst / release_dst
void tile_regs(Regs step, const char *call, Site at);
void hw_startup(int32_t icb0, int32_t icb1, int32_t ocb, Site at);
// `family` of the FPU op an init configures: see compute.cpp (copy, add, sub, mul, matmul, reduce, transpose,
// tilize, untilize, bcast_*).
void fpu_init(const char *family, int32_t icb0, int32_t icb1, uint32_t flags, const char *call, Site at);
void copy_tile(uint32_t cb, uint32_t tile, uint32_t dst, Site at);
void binary_tiles(const char *op, uint32_t icb0, uint32_t icb1, uint32_t t0, uint32_t t1, uint32_t dst, int bcast,
                  Site at);
void matmul_tiles(uint32_t in0, uint32_t in1, uint32_t t0, uint32_t t1, uint32_t dst, Site at);
void reduce_tile(int pool, int dim, uint32_t icb, uint32_t scb, uint32_t t, uint32_t st, uint32_t dst, Site at);
void transpose_tile(uint32_t cb, uint32_t tile, uint32_t dst, Site at);
void tilize_block(uint32_t icb, uint32_t block, uint32_t ocb, uint32_t in_tile, uint32_t out_tile, Site at);
void untilize_block(uint32_t icb, uint32_t block, uint32_t ocb, Site at);
void pack_tile(uint32_t dst, uint32_t ocb, uint32_t out_tile, bool out_of_order, Site at);
void sfpu_init(const char *op, Site at);
// op: an SFPU op name of native/runtime (exp, log, ...); approx: -1 = the kernel's math_approx_mode
void sfpu_unary(const char *op, uint32_t dst, int approx, float param, Site at);
void sfpu_binary(const char *op, uint32_t dst0, uint32_t dst1, uint32_t odst, Site at);
void sfpu_fill(uint32_t dst, float value, Site at);
void copy_dest(uint32_t src, uint32_t dst, Site at);
void reconfig(int which, int32_t cb, Site at);  // data-format reconfiguration: checks the CB exists
bool compute_fp32_dest_acc();
bool compute_approx();
void fail(const char *call, const char *message, Site at);  // ends the kernel with a ProgramError

}  // namespace ktt::host
