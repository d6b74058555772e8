/* The torch glue's C boundary: what ktt_torch.cpp exports, and the HAL entry points it calls back.
 *
 * The block between KTT_CDEF_BEGIN and KTT_CDEF_END is the one statement of this boundary: the glue includes it, and
 * kohakutt/native.py reads it into ctypes signatures and a ctypes structure for ktt_torch_hal, so neither side keeps
 * a copy of the other's declarations. Plain C only there: functions, and typedef structs of function pointers.
 */
#ifndef KTT_TORCH_H
#define KTT_TORCH_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* KTT_CDEF_BEGIN */
/* What the glue asks the HAL for, one typed entry point per request, grouped by concern. Device indices are torch's
 * (tt:<i>); streams and events are the integer ids the HAL side hands out (stream 0 is a device's default stream).
 * An entry point that fails calls ktt_torch_set_error before it returns; the glue then raises that message as a C++
 * exception (an out-of-memory error from alloc), which torch turns into a Python one. */
typedef struct ktt_torch_hal {
  /* devices */
  int32_t (*device_count)(void);
  void (*device_synchronize)(int32_t device);
  /* the allocator: storages are device memory at synthetic addresses */
  int64_t (*alloc)(int32_t device, int64_t nbytes);
  void (*copy)(int64_t dst, int64_t src, int64_t nbytes);
  void (*empty_cache)(void);
  /* stats[6]: allocated, peak allocated, reserved, peak reserved bytes; allocations, frees since the last reset */
  void (*memory_stats)(int32_t device, int64_t *stats);
  void (*reset_peak)(int32_t device);
  void (*reset_accumulated)(int32_t device);
  /* info[2]: free and total device memory in bytes */
  void (*memory_info)(int32_t device, int64_t *info);
  /* streams */
  int64_t (*stream_new)(int32_t device);
  int32_t (*stream_query)(int32_t device, int64_t stream);
  void (*stream_synchronize)(int32_t device, int64_t stream);
  /* events: 0 is an event not recorded yet; event_record returns the id to keep */
  int64_t (*event_record)(int64_t event, int32_t device, int64_t stream);
  void (*event_block)(int64_t event, int32_t device, int64_t stream);
  int32_t (*event_query)(int64_t event);
  void (*event_synchronize)(int64_t event);
  void (*event_destroy)(int64_t event);
  double (*event_elapsed_ms)(int64_t start, int64_t end);
  /* generators: a chip's default generator is the chip's random stream; state[2] is (seed, offset) */
  void (*generator_get)(int32_t device, uint64_t *state);
  void (*generator_set)(int32_t device, uint64_t seed, uint64_t offset);
} ktt_torch_hal;

/* Installs the allocator, guard and hooks (once) and routes them to `hal` (copied; safe to call again). */
void ktt_torch_install(const ktt_torch_hal *hal);
/* Called by an entry point before it returns, to make the glue raise `message`. */
void ktt_torch_set_error(const char *message);
/* Detaches the HAL (at interpreter exit): later frees become no-ops. */
void ktt_torch_uninstall(void);
int32_t ktt_torch_current_device(void);
int64_t ktt_torch_current_stream(int32_t device);
/* How many storages died since the last ktt_torch_take_frees (cheap: no lock). */
int64_t ktt_torch_pending_frees(void);
/* Moves up to `cap` data pointers of dead storages into `out`, oldest first; returns how many. */
int64_t ktt_torch_take_frees(int64_t *out, int64_t cap);
/* Puts `storage` (a StorageImpl*) under the fresh tensor `tensor` (a TensorImpl*), which takes the storage's device.
 * Returns 0, or -1 when the tensor refuses. */
int32_t ktt_torch_adopt_storage(void *tensor, void *storage);
/* Gives the fresh tensor `tensor` (a TensorImpl*) a new storage of `nbytes` over device memory `ptr` on tt:<device>,
 * then sizes and strides (`dims`: ndim sizes, then ndim strides) at offset 0. Returns 0, or -1 when the tensor refuses
 * (nothing is taken over then). */
int32_t ktt_torch_set_buffer(void *tensor, int64_t ptr, int64_t nbytes, int32_t device, int64_t ndim,
                             const int64_t *dims);
/* The next torch.Generator(device="tt:<i>") made by this thread is tt:<i>'s default generator (not a new one). */
void ktt_torch_next_generator_is_default(void);
/* KTT_CDEF_END */

#ifdef __cplusplus
}
#endif

#endif /* KTT_TORCH_H */
