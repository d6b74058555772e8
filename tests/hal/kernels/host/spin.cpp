#include <chrono>
#include <cstdint>

#include "api/dataflow/dataflow_api.h"

// A reader that loops for SPIN_SECONDS without calling the kernel API (host-only test kernel: it reads the clock),
// the way a kernel polling a semaphore through its pointer would: it never blocks, so only a stall can be seen.
void kernel_main() {
    volatile tt_l1_ptr uint32_t* sem = reinterpret_cast<volatile tt_l1_ptr uint32_t*>(get_semaphore(0));
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(SPIN_MS);
    while (*sem == 0 && std::chrono::steady_clock::now() < end) {
    }
}
