// The simulator core's state: a run, its cores (L1, circular buffers, semaphores) and its kernels (threads).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "ktt_host/host.h"
#include "ktt_sim.h"

namespace ktt::sim {

using ::ktt::host::Site;

// Unwinds a kernel thread once the run has failed (a broken rule, a deadlock); never escapes the run.
struct Abort {};

struct CB {
    int index = 0;
    DataFormat fmt = DataFormat::Invalid;
    int tile_kind = -1;  // ktt_tile_kind of the format, -1 for formats compute cannot unpack
    uint32_t tile_bytes = 0;
    uint32_t page_size = 0, num_pages = 0;
    uint8_t *base = nullptr;  // host address of the CB's first byte
    uint64_t pushed = 0, popped = 0;
    uint32_t reserved = 0;  // pages past the write pointer the producer may fill
    uint32_t waited = 0;    // pages past the read pointer the consumer may read
    uint64_t filled() const { return pushed - popped; }
    uint64_t free_pages() const { return num_pages - filled(); }
    uint8_t *end() const { return base + static_cast<size_t>(page_size) * num_pages; }
    uint8_t *slot(uint64_t n) const { return base + static_cast<size_t>(n % num_pages) * page_size; }
    bool writable(uint64_t s) const { return (s + num_pages - pushed % num_pages) % num_pages < reserved; }
    bool readable(uint64_t s) const { return (s + num_pages - popped % num_pages) % num_pages < waited; }
};

struct Core {
    int x = 0, y = 0;
    uint8_t *l1 = nullptr;
    std::vector<CB> cbs;
    CB *cb_at_index[64] = {};
    std::vector<std::pair<int, uint32_t>> sems;  // (id, L1 offset)
    CB *cb_containing(const uint8_t *p);
    bool is_semaphore(uint32_t offset) const;
};

struct Buffer {
    const ktt_sim_buffer *desc;
    uint64_t num_pages;
};

struct ComputeState;
struct Run;

struct Kernel {
    const ktt_sim_kernel *desc = nullptr;
    Core *core = nullptr;
    Run *run = nullptr;
    std::string who;  // "compute on core (1,2)"
    uint32_t args_offset = 0, common_offset = 0;
    uint64_t reads_in_flight = 0;   // CBs (bits) a NOC read is landing in since the last read barrier
    uint64_t writes_in_flight = 0;  // CBs a NOC write is sourcing from since the last flush
    bool finished = false;           // its thread has returned (set under the run's lock)
    std::unique_ptr<ComputeState> compute;
    Kernel();
    ~Kernel();
};

struct Run {
    const ktt_sim_run_desc *desc = nullptr;
    std::vector<Buffer> buffers;
    std::vector<std::unique_ptr<Core>> cores;  // the cores of the group running now
    std::mutex mu;
    std::condition_variable cv;
    int live = 0;
    struct Blocked {
        const std::function<bool()> *ready;  // lives in the blocked kernel's frame while it is registered
        std::function<std::string()> what;
    };
    std::unordered_map<Kernel *, Blocked> blocked;
    bool failed = false;
    std::string failure;
    std::chrono::steady_clock::time_point last_change = std::chrono::steady_clock::now();
    std::chrono::steady_clock::time_point failed_at;
    bool abandoned = false;  // a kernel thread never returned: the run's state must outlive the call

    Core *core_at(uint32_t x, uint32_t y);
    void changed();
    void fail(const std::string &message);
    bool none_ready();
    void deadlock();
    void block_until(Kernel *k, const std::function<bool()> &ready, const std::function<std::string()> &what,
                     std::unique_lock<std::mutex> &lock, const char *call, Site at);
};

// The kernel the calling thread runs (set by the run for each kernel thread).
Kernel &current();
// A ProgramError for the current kernel: "<call>: <message>", with the kernel, core and site; throws Abort.
[[noreturn]] void error(const char *call, const std::string &message, Site at);
std::string where(Site at);

// Compute side (compute.cpp).
void compute_at_end(Kernel &k);
void compute_create(Kernel &k);

// Helpers shared by both sides.
CB &cb_of(Kernel &k, int32_t cb, const char *call, Site at);
std::string plural(uint64_t n, const char *what);

}  // namespace ktt::sim
