// The simulator core: a program run (cores, kernel threads, blocking, deadlock detection) and the data-movement
// side of the host kernel API (arguments, circular buffers, the NOC, semaphores), with the card's rules.
//
// Each core's L1 is an arena of host memory below 4 GiB, so an L1 address fits the API's uint32_t and a kernel
// dereferences it as on the card; arenas are 2 MiB aligned, so an address has the same alignment as the card
// address it stands for. A NOC address is encoded here (never decoded by kernels): bits 62-63 say what it points
// to (1 a core's L1, 2 a DRAM bank, 3 an L1 bank), bit 61 marks a multicast rectangle, bits 40-55 the core or
// bank, bits 0-31 the address (an L1 offset for cores); kernels only add byte offsets to it.
#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <thread>

#include "internal.h"
#include "ktt_runtime.h"

namespace ktt::sim {

namespace {

constexpr uint64_t TAG_CORE = 1, TAG_DRAM = 2, TAG_L1BANK = 3;
constexpr uint64_t MULTICAST_BIT = 1ull << 61;
constexpr uint32_t ARGS_OFFSET = 0x1000;     // runtime args: 0x800 per kernel kind (up to 512 words)
constexpr uint32_t COMMON_OFFSET = 0x2800;   // common runtime args: 0x800 per kind
constexpr uint32_t SEMAPHORE_OFFSET = 0x4000;  // as the Python sim: one L1-aligned word per id
constexpr size_t ARENA_ALIGN = 2u << 20;

thread_local Kernel *tls_kernel = nullptr;

struct Failure {
    std::string message;
};

// ---- arenas: L1 below 4 GiB ------------------------------------------------------------------------------------
std::mutex arena_mu;
std::vector<uint8_t *> arena_pool;
size_t arena_bytes = 0;

uint8_t *map_low(size_t bytes) {
    static uintptr_t next_hint = 0x10000000;  // 256 MiB: clear of small L1 offsets and of the usual program break
    for (int tries = 0; tries < 4096; ++tries) {
        uintptr_t hint = next_hint;
        next_hint += bytes;
        if (hint + bytes > (1ull << 32)) next_hint = 0x10000000 + (hint & (ARENA_ALIGN - 1)) + ARENA_ALIGN;
        if (hint + bytes > (1ull << 32)) continue;
        void *p = mmap(reinterpret_cast<void *>(hint), bytes, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE | MAP_NORESERVE, -1, 0);
        if (p == MAP_FAILED) continue;
        if (reinterpret_cast<uintptr_t>(p) != hint) {  // an old kernel ignored MAP_FIXED_NOREPLACE
            munmap(p, bytes);
            continue;
        }
        return static_cast<uint8_t *>(p);
    }
    return nullptr;
}

uint8_t *take_arena(uint32_t l1_bytes) {
    std::lock_guard<std::mutex> g(arena_mu);
    size_t want = (static_cast<size_t>(l1_bytes) + ARENA_ALIGN - 1) / ARENA_ALIGN * ARENA_ALIGN;
    if (arena_bytes != want) {  // a card with another L1 size: start a new pool
        for (uint8_t *a : arena_pool) munmap(a, arena_bytes);
        arena_pool.clear();
        arena_bytes = want;
    }
    if (!arena_pool.empty()) {
        uint8_t *a = arena_pool.back();
        arena_pool.pop_back();
        madvise(a, arena_bytes, MADV_DONTNEED);  // back to zero pages
        return a;
    }
    return map_low(arena_bytes);
}

void give_arena(uint8_t *a) {
    std::lock_guard<std::mutex> g(arena_mu);
    arena_pool.push_back(a);
}

uint32_t host32(const void *p) { return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(p)); }

std::string fmt(const char *f, ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, f);
    vsnprintf(buf, sizeof buf, f, ap);
    va_end(ap);
    return buf;
}

}  // namespace

// ---- errors ----------------------------------------------------------------------------------------------------
std::string plural(uint64_t n, const char *what) { return fmt("%" PRIu64 " %s%s", n, what, n == 1 ? "" : "s"); }

std::string where(Site at) {
    if (at.file == nullptr) return "";
    const char *base = std::strrchr(at.file, '/');
    return fmt(" (%s:%d)", base ? base + 1 : at.file, at.line);
}

Kernel &current() {
    if (tls_kernel == nullptr) throw Failure{"a kernel API call outside a simulated kernel thread"};
    return *tls_kernel;
}

void error(const char *call, const std::string &message, Site at) {
    Kernel &k = current();
    throw Failure{fmt("program '%s': %s%s: %s: %s", k.run->desc->program, k.who.c_str(), where(at).c_str(), call,
                      message.c_str())};
}

// ---- run state -------------------------------------------------------------------------------------------------

CB *Core::cb_containing(const uint8_t *p) {
    for (CB &c : cbs)
        if (p >= c.base && p < c.end()) return &c;
    return nullptr;
}

bool Core::is_semaphore(uint32_t offset) const {
    for (auto &s : sems)
        if (s.second == offset) return true;
    return false;
}

Core *Run::core_at(uint32_t x, uint32_t y) {
    for (auto &c : cores)
        if (c->x == static_cast<int>(x) && c->y == static_cast<int>(y)) return c.get();
    return nullptr;
}

void Run::changed() {
    blocked.clear();
    last_change = std::chrono::steady_clock::now();
    cv.notify_all();
}

void Run::fail(const std::string &message) {
    if (!failed) {
        failed = true;
        failure = message;
        failed_at = std::chrono::steady_clock::now();
    }
    changed();
}

bool Run::none_ready() {
    for (auto &b : blocked)
        if ((*b.second.ready)()) return false;
    return true;
}

void Run::deadlock() {
    std::string waits;
    for (auto &b : blocked) {
        if (!waits.empty()) waits += "; ";
        waits += b.first->who + b.second.what();
    }
    fail(fmt("program '%s' deadlocked: %s. Every kernel still running is blocked, so it would hang on a card too: "
             "check that each cb_wait_front is fed by as many cb_push_back pages (and each cb_reserve_back freed "
             "by cb_pop_front), and that every semaphore wait has a matching set or inc",
             desc->program, waits.c_str()));
}

// Blocks (lock held) until ready(). A deadlock is every live kernel blocked with none of their conditions true;
// the registry is cleared on every state change, so the entries are current. A kernel that sees no change for
// stall_seconds (another kernel spinning without blocking) reports a stall.
void Run::block_until(Kernel *k, const std::function<bool()> &ready, const std::function<std::string()> &what,
                      std::unique_lock<std::mutex> &lock, const char *call, Site at) {
    while (!ready()) {
        if (failed) throw Abort{};
        blocked[k] = Blocked{&ready, [&what, call, at] { return where(at) + ": " + call + " " + what(); }};
        if (static_cast<int>(blocked.size()) >= live && none_ready()) {
            deadlock();
            throw Abort{};
        }
        cv.wait_for(lock, std::chrono::milliseconds(200));
        blocked.erase(k);  // re-registered on the next round: a state change may have cleared it already
        if (failed) throw Abort{};
        double idle = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_change).count();
        if (idle > desc->stall_seconds) {
            fail(fmt("program '%s' stalled: %s%s: %s %s, and no kernel changed a CB or semaphore for %.0f s",
                     desc->program, k->who.c_str(), where(at).c_str(), call, what().c_str(), desc->stall_seconds));
            throw Abort{};
        }
    }
    if (failed) throw Abort{};
}

namespace {

// A lock on the run that first checks it has not failed.
struct Locked {
    Kernel &k;
    std::unique_lock<std::mutex> lock;
    explicit Locked(Kernel &kernel) : k(kernel), lock(kernel.run->mu) {
        if (k.run->failed) throw Abort{};
    }
};

}  // namespace

CB &cb_of(Kernel &k, int32_t cb, const char *call, Site at) {
    if (cb < 0 || cb >= 64 || k.core->cb_at_index[cb] == nullptr) {
        std::string have;
        for (CB &c : k.core->cbs) have += (have.empty() ? "" : ", ") + std::to_string(c.index);
        error(call, fmt("CB %d is not defined on this core (its CBs: [%s])", cb, have.c_str()), at);
    }
    return *k.core->cb_at_index[cb];
}

}  // namespace ktt::sim

// ======================================================================================== the API: ktt::host
namespace ktt::host {

using namespace ktt::sim;

namespace {

void check_pages(Kernel &k, CB &c, int32_t n, const char *call, Site at) {
    if (n < 1 || static_cast<uint32_t>(n) > c.num_pages)
        error(call, fmt("CB %d has %u pages; a request must be 1..%u pages or it never completes", c.index,
                        c.num_pages, c.num_pages),
              at);
}

// The write / read pointer moves only forward and wraps at exactly the CB's end: a push or pop that would cross it
// corrupts the ring on the card (0.81.1's dataflow_api.h, cb_push_back).
void check_wrap(CB &c, uint64_t count, int32_t n, const char *call, const char *what, Site at) {
    uint64_t slot = count % c.num_pages;
    if (slot + static_cast<uint64_t>(n) > c.num_pages)
        error(call, fmt("%s %d pages at page slot %" PRIu64 " of CB %d's %u crosses the end of the ring; the %s "
                        "pointer wraps only at exactly the CB's end, so the pages a kernel moves in one call must "
                        "fit before it (make num_pages a multiple of the block)",
                        call, n, slot, c.index, c.num_pages, what),
              at);
}

}  // namespace

uint32_t arg_addr(int index, bool common, Site at) {
    Kernel &k = current();
    const uint32_t n = common ? k.desc->num_common_args : k.desc->num_args;
    if (index < 0 || static_cast<uint32_t>(index) >= n)
        error(common ? "get_common_arg_val" : "get_arg_val",
              fmt("argument %d, but the kernel has %s%s", index, plural(n, common ? "common runtime arg" : "runtime arg").c_str(),
                  common ? "" : " on this core"),
              at);
    return host32(k.core->l1 + (common ? k.common_offset : k.args_offset) + 4u * static_cast<uint32_t>(index));
}

uint8_t my_coord(int axis) {
    Kernel &k = current();
    return static_cast<uint8_t>(axis == 0 ? k.core->x : k.core->y);
}

// ---- circular buffers ------------------------------------------------------------------------------------------
void cb_reserve_back(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, cb, "cb_reserve_back", at);
    check_pages(k, c, pages, "cb_reserve_back", at);
    const uint64_t n = static_cast<uint64_t>(pages);
    k.run->block_until(
        &k, [&] { return c.free_pages() >= n; },
        [&, cb] {
            return fmt("waits for %s in CB %d that no kernel pops (%" PRIu64 " of %u free)",
                       plural(n, "free page").c_str(), cb, c.free_pages(), c.num_pages);
        },
        l.lock, "cb_reserve_back", at);
    c.reserved = std::max<uint32_t>(c.reserved, static_cast<uint32_t>(pages));
}

void cb_push_back(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, cb, "cb_push_back", at);
    check_pages(k, c, pages, "cb_push_back", at);
    if (static_cast<uint32_t>(pages) > c.reserved)
        error("cb_push_back",
              fmt("pushes %d pages of CB %d but only %u are reserved: call cb_reserve_back(%d, %d) first "
                  "(unreserved pages may still hold data the consumer has not read)",
                  pages, cb, c.reserved, cb, pages),
              at);
    check_wrap(c, c.pushed, pages, "cb_push_back", "write", at);
    if (k.reads_in_flight & (1ull << cb))
        error("cb_push_back",
              fmt("CB %d while a noc_async_read into it is in flight: call noc_async_read_barrier() first, or "
                  "the consumer may see the page before its data lands",
                  cb),
              at);
    c.pushed += static_cast<uint64_t>(pages);
    c.reserved -= static_cast<uint32_t>(pages);
    k.run->changed();
}

void cb_wait_front(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, cb, "cb_wait_front", at);
    check_pages(k, c, pages, "cb_wait_front", at);
    const uint64_t n = static_cast<uint64_t>(pages);
    k.run->block_until(
        &k, [&] { return c.filled() >= n; },
        [&, cb] {
            return fmt("waits for %s in CB %d that no kernel pushes (%" PRIu64 " of %u filled)",
                       plural(n, "page").c_str(), cb, c.filled(), c.num_pages);
        },
        l.lock, "cb_wait_front", at);
    c.waited = std::max<uint32_t>(c.waited, static_cast<uint32_t>(pages));
}

void cb_pop_front(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, cb, "cb_pop_front", at);
    check_pages(k, c, pages, "cb_pop_front", at);
    if (static_cast<uint32_t>(pages) > c.waited)
        error("cb_pop_front",
              fmt("pops %d pages of CB %d but only %u were waited for: call cb_wait_front(%d, %d) first", pages, cb,
                  c.waited, cb, pages),
              at);
    check_wrap(c, c.popped, pages, "cb_pop_front", "read", at);
    if (k.writes_in_flight & (1ull << cb))
        error("cb_pop_front",
              fmt("CB %d while a noc_async_write out of it is in flight: call noc_async_writes_flushed() (or "
                  "noc_async_write_barrier()) first, or the producer may overwrite the page before it leaves L1",
                  cb),
              at);
    c.popped += static_cast<uint64_t>(pages);
    c.waited -= static_cast<uint32_t>(pages);
    k.run->changed();
}

bool cb_pages_reservable_at_back(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    return cb_of(k, cb, "cb_pages_reservable_at_back", at).free_pages() >= static_cast<uint64_t>(pages);
}

bool cb_pages_available_at_front(int32_t cb, int32_t pages, Site at) {
    Kernel &k = current();
    Locked l(k);
    return cb_of(k, cb, "cb_pages_available_at_front", at).filled() >= static_cast<uint64_t>(pages);
}

uint32_t cb_write_ptr(uint32_t cb, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, static_cast<int32_t>(cb), "get_write_ptr", at);
    return host32(c.slot(c.pushed));
}

uint32_t cb_read_ptr(uint32_t cb, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, static_cast<int32_t>(cb), "get_read_ptr", at);
    return host32(c.slot(c.popped));
}

uint32_t cb_tile_size(int32_t cb, Site at) {
    Kernel &k = current();
    Locked l(k);
    CB &c = cb_of(k, cb, "get_tile_size", at);
    if (c.tile_bytes == 0) error("get_tile_size", fmt("CB %d's data format has no tile size", cb), at);
    return c.tile_bytes;
}

DataFormat cb_format(int32_t cb, Site at) {
    Kernel &k = current();
    Locked l(k);
    return cb_of(k, cb, "get_dataformat", at).fmt;
}

// ---- the NOC ---------------------------------------------------------------------------------------------------
namespace {

// This core's L1 offset of a kernel's L1 address (a host address in its arena, or an offset below the L1 size).
uint32_t l1_offset(Kernel &k, uint32_t addr, const char *call, Site at) {
    const uint32_t base = host32(k.core->l1), size = k.run->desc->l1_bytes;
    if (addr >= base && addr - base < size) return addr - base;
    if (addr < size) return addr;
    error(call, fmt("address %#x is not an L1 address of this core (take L1 addresses from get_write_ptr, "
                    "get_read_ptr or get_semaphore)",
                    addr),
          at);
}

// Checks an L1 range of `core` a transfer touches: inside L1, inside one CB (pages reserved for a write, waited for
// or reserved for a read) or a semaphore. Returns the CB, or nullptr for a semaphore.
CB *check_l1(Kernel &k, Core &core, uint32_t offset, uint32_t size, bool writing, const char *call, Site at) {
    const uint32_t l1 = k.run->desc->l1_bytes;
    if (static_cast<uint64_t>(offset) + size > l1)
        error(call, fmt("%u B at L1 offset %#x runs outside core (%d,%d)'s L1 (%u B)", size, offset, core.x, core.y, l1),
              at);
    if (size == 0) return nullptr;
    if (core.is_semaphore(offset) && size <= 4) return nullptr;
    uint8_t *p = core.l1 + offset;
    CB *c = core.cb_containing(p);
    const char *verb = writing ? "writes" : "reads";
    if (c == nullptr)
        error(call, fmt("%s L1 offset %#x on core (%d,%d), which is in no circular buffer or semaphore of the program",
                        verb, offset, core.x, core.y),
              at);
    if (p + size > c->end())
        error(call, fmt("%u B at L1 offset %#x on core (%d,%d) runs %td B past the end of CB %d (%u pages of %u B)",
                        size, offset, core.x, core.y, (p + size) - c->end(), c->index, c->num_pages, c->page_size),
              at);
    const uint64_t first = static_cast<uint64_t>(p - c->base) / c->page_size;
    const uint64_t last = static_cast<uint64_t>(p + size - 1 - c->base) / c->page_size;
    for (uint64_t s = first; s <= last; ++s) {
        if (writing && !c->writable(s))
            error(call, fmt("writes page slot %" PRIu64 " of CB %d on core (%d,%d), which is not reserved (%u reserved "
                            "at the back, %" PRIu64 " filled): call cb_reserve_back before writing into a CB",
                            s, c->index, core.x, core.y, c->reserved, c->filled()),
                  at);
        if (!writing && !(c->readable(s) || c->writable(s)))
            error(call, fmt("reads page slot %" PRIu64 " of CB %d on core (%d,%d), which holds no page waited for or "
                            "reserved: call cb_wait_front before reading a CB",
                            s, c->index, core.x, core.y),
                  at);
    }
    return c;
}

struct Target {
    uint64_t tag;
    bool multicast;
    uint32_t a, b, c, d;  // core x, y (or x0, y0, x1, y1 for a multicast); bank in a for banks
    uint32_t addr;
};

Target decode(uint64_t noc) {
    Target t{};
    t.tag = noc >> 62;
    t.multicast = (noc & MULTICAST_BIT) != 0;
    t.addr = static_cast<uint32_t>(noc);
    if (t.multicast) {
        t.a = (noc >> 52) & 0xff;
        t.b = (noc >> 44) & 0xff;
        t.c = (noc >> 36) & 0xff;
        t.d = ((noc >> 32) & 0xf) | (((noc >> 60) & 1) << 4);
    } else {
        t.a = (noc >> 48) & 0xff;
        t.b = (noc >> 40) & 0xff;
    }
    return t;
}

// The bytes of a buffer a DRAM / L1-bank range covers: a pointer into the buffer and how many of `size` bytes lie
// inside its data (the rest of the last page reads as zero and is dropped on writes).
uint8_t *bank_span(Kernel &k, bool dram, uint32_t bank, uint32_t addr, uint32_t size, uint64_t &avail,
                   const char *call, Site at) {
    Run &r = *k.run;
    const uint32_t banks = dram ? r.desc->dram_banks : r.desc->l1_banks;
    for (Buffer &b : r.buffers) {
        const ktt_sim_buffer &d = *b.desc;
        if ((d.dram != 0) != dram || addr < d.address || addr >= d.address + d.bank_bytes) continue;
        const uint64_t local = addr - d.address;
        const uint64_t slot = local / d.page_stride, within = local % d.page_stride;
        const uint64_t page = slot * banks + bank;
        if (page >= b.num_pages)
            error(call, fmt("%s bank %u address %#x is page %" PRIu64 " of the buffer at %#" PRIx64 ", which has %s",
                            dram ? "DRAM" : "L1", bank, addr, page, d.address, plural(b.num_pages, "page").c_str()),
                  at);
        // A page's bank slot is page_stride bytes (the page rounded up to the bank's alignment): a transfer may
        // cover the padding after the page (zeros here; writes to it are dropped), never the next slot.
        if (within + size > d.page_stride)
            error(call, fmt("%u B at byte %" PRIu64 " of page %" PRIu64 " of the buffer at %#" PRIx64 " runs past the "
                            "page's bank slot (%u B page, %u B slot); pages of an interleaved buffer are not "
                            "contiguous",
                            size, within, page, d.address, d.page_size, d.page_stride),
                  at);
        const uint64_t start = page * d.page_size + within;
        const uint64_t in_page = within >= d.page_size ? 0 : std::min<uint64_t>(size, d.page_size - within);
        avail = start >= d.nbytes ? 0 : std::min<uint64_t>(in_page, d.nbytes - start);
        return static_cast<uint8_t *>(d.data) + start;
    }
    error(call, fmt("%s bank %u address %#x is in no buffer the program runs over", dram ? "DRAM" : "L1", bank, addr),
          at);
}

void check_alignment(uint32_t local, uint32_t remote, uint32_t align, const char *call, const char *what, Site at) {
    if ((local & (align - 1)) != (remote & (align - 1)))
        error(call, fmt("%s: the L1 address %#x and the %s address %#x differ modulo %u B; Blackhole's NOC needs them "
                        "equally aligned (%s, noc_parameters.h)",
                        what, local, what, remote, align,
                        align == 64 ? "NOC_DRAM_READ_ALIGNMENT_BYTES = 64" : "16 B for L1 and DRAM writes"),
              at);
}

Core &target_core(Kernel &k, uint32_t x, uint32_t y, const char *call, Site at) {
    const ktt_sim_run_desc &d = *k.run->desc;
    if (static_cast<int>(x) >= d.grid_x || static_cast<int>(y) >= d.grid_y)
        error(call, fmt("addresses core (%u,%u), outside the %d x %d worker grid", x, y, d.grid_x, d.grid_y), at);
    Core *c = k.run->core_at(x, y);
    if (c == nullptr)
        error(call, fmt("addresses core (%u,%u), which runs no kernel of this program (or the program has no "
                        "semaphores, so its cores run one at a time and cannot reach each other)",
                        x, y),
              at);
    return *c;
}

}  // namespace

uint64_t noc_core_addr(uint32_t x, uint32_t y, uint32_t l1_addr, Site at) {
    Kernel &k = current();
    return (TAG_CORE << 62) | (static_cast<uint64_t>(x & 0xff) << 48) | (static_cast<uint64_t>(y & 0xff) << 40) |
           l1_offset(k, l1_addr, "get_noc_addr", at);
}

uint64_t noc_local_addr(uint32_t l1_addr, Site at) {
    Kernel &k = current();
    return noc_core_addr(static_cast<uint32_t>(k.core->x), static_cast<uint32_t>(k.core->y), l1_addr, at);
}

uint64_t noc_multicast_addr(uint32_t x0, uint32_t y0, uint32_t x1, uint32_t y1, uint32_t l1_addr, Site at) {
    Kernel &k = current();
    if (x1 < x0 || y1 < y0)
        error("get_noc_multicast_addr", fmt("the rectangle (%u,%u)-(%u,%u) is empty", x0, y0, x1, y1), at);
    const uint32_t off = l1_offset(k, l1_addr, "get_noc_multicast_addr", at);
    return (TAG_CORE << 62) | MULTICAST_BIT | ((static_cast<uint64_t>(y1 >> 4) & 1) << 60) |
           (static_cast<uint64_t>(x0 & 0xff) << 52) | (static_cast<uint64_t>(y0 & 0xff) << 44) |
           (static_cast<uint64_t>(x1 & 0xff) << 36) | (static_cast<uint64_t>(y1 & 0xf) << 32) | off;
}

uint64_t noc_bank_addr(bool dram, uint32_t bank, uint32_t addr, Site at) {
    Kernel &k = current();
    const uint32_t banks = dram ? k.run->desc->dram_banks : k.run->desc->l1_banks;
    if (bank >= banks)
        error("get_noc_addr", fmt("%s bank %u, but the card has %u", dram ? "DRAM" : "L1", bank, banks), at);
    return ((dram ? TAG_DRAM : TAG_L1BANK) << 62) | (static_cast<uint64_t>(bank) << 48) | addr;
}

uint32_t num_banks(bool dram) {
    Kernel &k = current();
    return dram ? k.run->desc->dram_banks : k.run->desc->l1_banks;
}

uint32_t bank_alignment(bool dram) {
    Kernel &k = current();
    return dram ? k.run->desc->dram_read_align : k.run->desc->l1_align;
}

void noc_read(uint64_t src, uint32_t dst_l1, uint32_t size, const char *call, Site at) {
    Kernel &k = current();
    Locked l(k);
    const ktt_sim_run_desc &d = *k.run->desc;
    const uint32_t dst = l1_offset(k, dst_l1, call, at);
    Target t = decode(src);
    CB *into = check_l1(k, *k.core, dst, size, true, call, at);
    if (size == 0) return;
    uint8_t *out = k.core->l1 + dst;
    if (t.tag == TAG_DRAM || t.tag == TAG_L1BANK) {
        const bool dram = t.tag == TAG_DRAM;
        check_alignment(dst, t.addr, dram ? d.dram_read_align : d.l1_align, call, dram ? "DRAM read" : "L1 read", at);
        uint64_t avail = 0;
        uint8_t *p = bank_span(k, dram, t.a, t.addr, size, avail, call, at);
        std::memcpy(out, p, avail);
        std::memset(out + avail, 0, size - avail);
    } else if (t.tag == TAG_CORE && !t.multicast) {
        Core &other = target_core(k, t.a, t.b, call, at);
        check_alignment(dst, t.addr, d.l1_align, call, "L1 read", at);
        check_l1(k, other, t.addr, size, false, call, at);
        std::memmove(out, other.l1 + t.addr, size);
    } else {
        error(call, "reads from a multicast address or a value that is no NOC address: take source addresses "
                    "from get_noc_addr or an address generator",
              at);
    }
    if (into != nullptr) k.reads_in_flight |= 1ull << into->index;
}

void noc_write(uint32_t src_l1, uint64_t dst, uint32_t size, const char *call, Site at) {
    Kernel &k = current();
    Locked l(k);
    const ktt_sim_run_desc &d = *k.run->desc;
    const uint32_t src = l1_offset(k, src_l1, call, at);
    CB *from = check_l1(k, *k.core, src, size, false, call, at);
    if (size == 0) return;
    Target t = decode(dst);
    const uint8_t *in = k.core->l1 + src;
    if (t.tag == TAG_DRAM || t.tag == TAG_L1BANK) {
        const bool dram = t.tag == TAG_DRAM;
        check_alignment(src, t.addr, dram ? d.dram_write_align : d.l1_align, call, dram ? "DRAM write" : "L1 write",
                        at);
        uint64_t avail = 0;
        uint8_t *p = bank_span(k, dram, t.a, t.addr, size, avail, call, at);
        std::memcpy(p, in, avail);
    } else if (t.tag == TAG_CORE && !t.multicast) {
        Core &other = target_core(k, t.a, t.b, call, at);
        check_alignment(src, t.addr, d.l1_align, call, "L1 write", at);
        check_l1(k, other, t.addr, size, true, call, at);
        std::memmove(other.l1 + t.addr, in, size);
        k.run->changed();
    } else {
        error(call, t.multicast ? "writes to a multicast address: use noc_async_write_multicast"
                                : "writes to a value that is no NOC address: take destinations from get_noc_addr or "
                                  "an address generator",
              at);
    }
    if (from != nullptr) k.writes_in_flight |= 1ull << from->index;
}

void noc_write_multicast(uint32_t src_l1, uint64_t dst, uint32_t size, uint32_t num_dests, bool loopback,
                         const char *call, Site at) {
    Kernel &k = current();
    Locked l(k);
    const uint32_t src = l1_offset(k, src_l1, call, at);
    CB *from = check_l1(k, *k.core, src, size, false, call, at);
    Target t = decode(dst);
    if (t.tag != TAG_CORE || !t.multicast) error(call, "needs an address from get_noc_multicast_addr", at);
    check_alignment(src, t.addr, k.run->desc->l1_align, call, "L1 write", at);
    std::vector<Core *> targets;
    bool self = false;
    for (uint32_t y = t.b; y <= t.d; ++y)
        for (uint32_t x = t.a; x <= t.c; ++x) {
            if (static_cast<int>(x) == k.core->x && static_cast<int>(y) == k.core->y) {
                self = true;
                if (!loopback) continue;
            }
            targets.push_back(&target_core(k, x, y, call, at));
        }
    const uint32_t others = static_cast<uint32_t>(targets.size()) - (loopback && self ? 1u : 0u);
    if (num_dests != others)
        error(call, fmt("num_dests=%u, but the rectangle (%u,%u)-(%u,%u) holds %u cores besides this one", num_dests,
                        t.a, t.b, t.c, t.d, others),
              at);
    for (Core *c : targets) {
        check_l1(k, *c, t.addr, size, true, call, at);
        std::memmove(c->l1 + t.addr, k.core->l1 + src, size);
    }
    k.run->changed();
    if (from != nullptr) k.writes_in_flight |= 1ull << from->index;
}

void noc_barrier(int what, Site at) {
    Kernel &k = current();
    Locked l(k);
    if (what & 1) k.reads_in_flight = 0;
    if (what & 6) k.writes_in_flight = 0;
}

void noc_inline_write(uint64_t dst, uint32_t value, Site at) {
    Kernel &k = current();
    Locked l(k);
    Target t = decode(dst);
    if (t.tag != TAG_CORE || t.multicast) error("noc_inline_dw_write", "needs one core's address from get_noc_addr", at);
    Core &other = target_core(k, t.a, t.b, "noc_inline_dw_write", at);
    if (t.addr % 4 != 0) error("noc_inline_dw_write", fmt("L1 offset %#x is not 4-byte aligned", t.addr), at);
    check_l1(k, other, t.addr, 4, true, "noc_inline_dw_write", at);
    std::memcpy(other.l1 + t.addr, &value, 4);
    k.run->changed();
}

// ---- semaphores ------------------------------------------------------------------------------------------------
uint32_t semaphore_addr(uint32_t id, Site at) {
    Kernel &k = current();
    const uint32_t off = SEMAPHORE_OFFSET + id * k.run->desc->l1_align;
    if (!k.core->is_semaphore(off)) {
        std::string ids;
        for (auto &s : k.core->sems) ids += (ids.empty() ? "" : ", ") + std::to_string(s.first);
        error("get_semaphore", fmt("semaphore %u is not defined on this core (its semaphores: [%s])", id, ids.c_str()),
              at);
    }
    return host32(k.core->l1 + off);
}

namespace {
uint32_t local_semaphore(Kernel &k, const volatile uint32_t *addr, const char *call, Site at) {
    const uint32_t off = l1_offset(k, host32(const_cast<const uint32_t *>(addr)), call, at);
    if (!k.core->is_semaphore(off))
        error(call, fmt("L1 offset %#x of core (%d,%d) is not a semaphore of the program there; take addresses from "
                        "get_semaphore(id)",
                        off, k.core->x, k.core->y),
              at);
    return off;
}
}  // namespace

void semaphore_wait(volatile uint32_t *addr, uint32_t value, bool at_least, Site at) {
    Kernel &k = current();
    const char *call = at_least ? "noc_semaphore_wait_min" : "noc_semaphore_wait";
    Locked l(k);
    const uint32_t off = local_semaphore(k, addr, call, at);
    volatile uint32_t *p = reinterpret_cast<volatile uint32_t *>(k.core->l1 + off);
    k.run->block_until(
        &k, [&] { return at_least ? *p >= value : *p == value; },
        [&] {
            return fmt("waits for the semaphore at L1 offset %#x %s %u, which no kernel sets (it is %u)", off,
                       at_least ? "to reach" : "to be", value, static_cast<uint32_t>(*p));
        },
        l.lock, call, at);
}

void semaphore_set(volatile uint32_t *addr, uint32_t value, Site at) {
    Kernel &k = current();
    Locked l(k);
    const uint32_t off = local_semaphore(k, addr, "noc_semaphore_set", at);
    *reinterpret_cast<volatile uint32_t *>(k.core->l1 + off) = value;
    k.run->changed();
}

void semaphore_inc(uint64_t dst, uint32_t incr, Site at) {
    Kernel &k = current();
    Locked l(k);
    Target t = decode(dst);
    if (t.tag != TAG_CORE || t.multicast)
        error("noc_semaphore_inc", "needs one core's address from get_noc_addr(x, y, addr)", at);
    Core &other = target_core(k, t.a, t.b, "noc_semaphore_inc", at);
    if (!other.is_semaphore(t.addr))
        error("noc_semaphore_inc",
              fmt("L1 offset %#x of core (%d,%d) is not a semaphore of the program there", t.addr, other.x, other.y),
              at);
    volatile uint32_t *p = reinterpret_cast<volatile uint32_t *>(other.l1 + t.addr);
    *p = *p + incr;
    k.run->changed();
}

void semaphore_set_remote(uint32_t src_l1, uint64_t dst, Site at) {
    Kernel &k = current();
    Locked l(k);
    const uint32_t src = l1_offset(k, src_l1, "noc_semaphore_set_remote", at);
    if (!k.core->is_semaphore(src))
        error("noc_semaphore_set_remote", fmt("the source L1 offset %#x is not a semaphore of this core", src), at);
    Target t = decode(dst);
    if (t.tag != TAG_CORE || t.multicast)
        error("noc_semaphore_set_remote", "needs one core's address from get_noc_addr(x, y, addr)", at);
    Core &other = target_core(k, t.a, t.b, "noc_semaphore_set_remote", at);
    if (!other.is_semaphore(t.addr))
        error("noc_semaphore_set_remote", fmt("L1 offset %#x of core (%d,%d) is not a semaphore of the program there",
                                              t.addr, other.x, other.y),
              at);
    std::memcpy(other.l1 + t.addr, k.core->l1 + src, 4);
    k.run->changed();
}

void semaphore_set_multicast(uint32_t src_l1, uint64_t dst, uint32_t num_dests, bool loopback, Site at) {
    Kernel &k = current();
    const char *call = loopback ? "noc_semaphore_set_multicast_loopback_src" : "noc_semaphore_set_multicast";
    Locked l(k);
    const uint32_t src = l1_offset(k, src_l1, call, at);
    if (!k.core->is_semaphore(src)) error(call, fmt("the source L1 offset %#x is not a semaphore of this core", src), at);
    Target t = decode(dst);
    if (t.tag != TAG_CORE || !t.multicast) error(call, "needs an address from get_noc_multicast_addr", at);
    uint32_t others = 0;
    std::vector<Core *> targets;
    for (uint32_t y = t.b; y <= t.d; ++y)
        for (uint32_t x = t.a; x <= t.c; ++x) {
            bool self = static_cast<int>(x) == k.core->x && static_cast<int>(y) == k.core->y;
            if (!self) ++others;
            if (self && !loopback) continue;
            Core &c = target_core(k, x, y, call, at);
            if (!c.is_semaphore(t.addr))
                error(call, fmt("L1 offset %#x of core (%u,%u) is not a semaphore of the program there", t.addr, x, y),
                      at);
            targets.push_back(&c);
        }
    if (num_dests != others)
        error(call, fmt("num_dests=%u, but the rectangle holds %u cores besides this one", num_dests, others), at);
    uint32_t v;
    std::memcpy(&v, k.core->l1 + src, 4);
    for (Core *c : targets) std::memcpy(c->l1 + t.addr, &v, 4);
    k.run->changed();
}

void fail(const char *call, const char *message, Site at) { error(call, message, at); }

}  // namespace ktt::host

// ======================================================================================== running a program
namespace ktt::sim {

namespace {

int tile_kind_of(int32_t format) {
    switch (static_cast<DataFormat>(format)) {
    case DataFormat::Float32: return KTT_TILE_RAW32;
    case DataFormat::Float16_b: return KTT_TILE_BF16;
    case DataFormat::Bfp8_b: return KTT_TILE_BFP8;
    case DataFormat::Bfp4_b: return KTT_TILE_BFP4;
    default: return -1;
    }
}

uint32_t tile_bytes_of(int32_t format) {
    switch (static_cast<DataFormat>(format)) {
    case DataFormat::Float32:
    case DataFormat::Int32:
    case DataFormat::UInt32: return 4096;
    case DataFormat::Float16_b:
    case DataFormat::UInt16: return 2048;
    case DataFormat::Bfp8_b: return 1088;
    case DataFormat::Bfp4_b: return 576;
    case DataFormat::UInt8: return 1024;
    default: return 0;
    }
}

using Entry = void (*)();

void body(Kernel *k) {
    tls_kernel = k;
    Run &r = *k->run;
    try {
        reinterpret_cast<Entry>(k->desc->entry)();
        if (k->compute) {
            std::lock_guard<std::mutex> g(r.mu);
            compute_at_end(*k);
        }
    } catch (Failure &f) {
        std::lock_guard<std::mutex> g(r.mu);
        r.fail(f.message);
    } catch (Abort &) {
    } catch (std::exception &e) {
        std::lock_guard<std::mutex> g(r.mu);
        r.fail(fmt("program '%s': %s: the kernel threw %s", r.desc->program, k->who.c_str(), e.what()));
    } catch (...) {
        std::lock_guard<std::mutex> g(r.mu);
        r.fail(fmt("program '%s': %s: the kernel threw an unknown C++ exception", r.desc->program, k->who.c_str()));
    }
    std::lock_guard<std::mutex> g(r.mu);
    k->finished = true;
    r.live -= 1;
    if (!r.failed && r.live > 0 && static_cast<int>(r.blocked.size()) >= r.live && r.none_ready()) r.deadlock();
    r.cv.notify_all();
    tls_kernel = nullptr;
}

// The end of a program: on every core, every page reserved in a CB was pushed and every page pushed was popped (a
// page left behind is work no kernel consumed, or a consumer that stopped early; a scratch page is pushed, waited for
// and popped too).
void check_balance(Run &r) {
    for (auto &core : r.cores)
        for (CB &c : core->cbs) {
            if (c.pushed == c.popped && c.reserved == 0) continue;
            std::string what;
            if (c.pushed != c.popped)
                what = fmt("%s pushed and never popped (%" PRIu64 " pushed, %" PRIu64 " popped)",
                           plural(c.pushed - c.popped, "page").c_str(), c.pushed, c.popped);
            else
                what = fmt("%s reserved and never pushed", plural(c.reserved, "page").c_str());
            r.fail(fmt("program '%s': CB %d on core (%d,%d) ends the program unbalanced: %s. Every cb_reserve_back "
                       "needs its cb_push_back and every cb_push_back its cb_wait_front / cb_pop_front (a scratch "
                       "page too)",
                       r.desc->program, c.index, core->x, core->y, what.c_str()));
            return;
        }
}

void run_group(Run &r, const ktt_sim_core *cores, const std::vector<int> &group) {
    const ktt_sim_run_desc &d = *r.desc;
    std::vector<std::unique_ptr<Kernel>> kernels;
    r.cores.clear();
    for (int i : group) {
        const ktt_sim_core &cd = cores[i];
        auto core = std::make_unique<Core>();
        core->x = cd.x;
        core->y = cd.y;
        core->l1 = take_arena(d.l1_bytes);
        if (core->l1 == nullptr) {
            r.fail(fmt("program '%s': cannot map simulated L1 for core (%d,%d) below 4 GiB (%s)", d.program, cd.x,
                       cd.y, std::strerror(errno)));
            return;
        }
        core->cbs.resize(static_cast<size_t>(cd.num_cbs));
        for (int j = 0; j < cd.num_cbs; ++j) {
            const ktt_sim_cb &cb = cd.cbs[j];
            CB &c = core->cbs[static_cast<size_t>(j)];
            c.index = cb.index;
            c.fmt = static_cast<DataFormat>(cb.format);
            c.tile_kind = tile_kind_of(cb.format);
            c.tile_bytes = tile_bytes_of(cb.format);
            c.page_size = cb.page_size;
            c.num_pages = cb.num_pages;
            c.base = core->l1 + cb.address;
        }
        for (CB &c : core->cbs) core->cb_at_index[c.index] = &c;
        for (int j = 0; j < cd.num_semaphores; ++j) {
            const ktt_sim_semaphore &s = cd.semaphores[j];
            core->sems.emplace_back(s.id, s.address);
            std::memcpy(core->l1 + s.address, &s.initial_value, 4);
        }
        for (int j = 0; j < cd.num_kernels; ++j) {
            const ktt_sim_kernel &kd = cd.kernels[j];
            auto k = std::make_unique<Kernel>();
            k->desc = &kd;
            k->core = core.get();
            k->run = &r;
            k->who = fmt("%s on core (%d,%d)", kd.name, cd.x, cd.y);
            k->args_offset = ARGS_OFFSET + 0x800u * static_cast<uint32_t>(kd.kind);
            k->common_offset = COMMON_OFFSET + 0x800u * static_cast<uint32_t>(kd.kind);
            std::memcpy(core->l1 + k->args_offset, kd.args, 4u * kd.num_args);
            std::memcpy(core->l1 + k->common_offset, kd.common_args, 4u * kd.num_common_args);
            if (kd.kind == 2) compute_create(*k);
            kernels.push_back(std::move(k));
        }
        r.cores.push_back(std::move(core));
    }
    {
        std::lock_guard<std::mutex> g(r.mu);
        r.live = static_cast<int>(kernels.size());
        r.blocked.clear();
        r.last_change = std::chrono::steady_clock::now();
    }
    std::vector<std::thread> threads;
    threads.reserve(kernels.size());
    for (auto &k : kernels) threads.emplace_back(body, k.get());
    // Wait for every kernel to return. A kernel looping without any kernel API call can neither block (so no
    // deadlock is seen) nor be stopped: after stall_seconds without a CB or semaphore change the run fails, and a
    // kernel still running a few seconds after a failure is abandoned (its thread, core and the run's state are
    // left alive; every API call it makes from then on unwinds it).
    std::vector<std::string> stuck;
    {
        std::unique_lock<std::mutex> lock(r.mu);
        const auto grace = std::chrono::seconds(5);
        for (;;) {
            size_t done = 0;
            for (auto &k : kernels) done += k->finished ? 1 : 0;
            if (done == kernels.size()) break;
            const auto now = std::chrono::steady_clock::now();
            if (!r.failed && std::chrono::duration<double>(now - r.last_change).count() > d.stall_seconds) {
                std::string who;
                for (auto &k : kernels)
                    if (!k->finished && r.blocked.count(k.get()) == 0) who += (who.empty() ? "" : ", ") + k->who;
                r.fail(fmt("program '%s' stalled: %s did not return and no kernel changed a CB or semaphore for %.0f s "
                           "(a loop that calls no kernel API, e.g. polling a semaphore through its pointer, never "
                           "ends: wait with noc_semaphore_wait)",
                           d.program, who.empty() ? "a kernel" : who.c_str(), d.stall_seconds));
            }
            if (r.failed && now - r.failed_at > grace) {
                for (auto &k : kernels)
                    if (!k->finished) stuck.push_back(k->who);
                break;
            }
            r.cv.wait_for(lock, std::chrono::milliseconds(200));
        }
        if (!stuck.empty()) {
            std::string names;
            for (auto &s : stuck) names += (names.empty() ? "" : ", ") + s;
            r.failure += "; " + names + (stuck.size() == 1 ? " does" : " do") +
                         " not return (a loop that calls no kernel API cannot be stopped): its thread is left running";
            r.abandoned = true;
        }
    }
    for (size_t i = 0; i < threads.size(); ++i) {
        if (kernels[i]->finished) {
            threads[i].join();
        } else {
            threads[i].detach();
        }
    }
    if (!r.failed) check_balance(r);
    if (r.abandoned) {  // the abandoned threads still use their kernels and cores: leave them to them
        for (auto &k : kernels) k.release();
        for (auto &c : r.cores) c.release();
    } else {
        kernels.clear();
        for (auto &c : r.cores) give_arena(c->l1);
    }
    r.cores.clear();
}

}  // namespace

}  // namespace ktt::sim

extern "C" {

int ktt_sim_version(void) { return 1; }

int ktt_sim_run(const ktt_sim_run_desc *run, const ktt_sim_buffer *buffers, int32_t num_buffers,
                const ktt_sim_core *cores, int32_t num_cores, char *error, size_t error_len) {
    using namespace ktt::sim;
    auto owned = std::make_unique<Run>();
    Run &r = *owned;
    r.desc = run;
    for (int i = 0; i < num_buffers; ++i) {
        const ktt_sim_buffer &b = buffers[i];
        r.buffers.push_back(Buffer{&b, b.page_size ? (b.nbytes + b.page_size - 1) / b.page_size : 0});
    }
    try {
        if (run->concurrent) {
            std::vector<int> all;
            for (int i = 0; i < num_cores; ++i) all.push_back(i);
            run_group(r, cores, all);
        } else {
            for (int i = 0; i < num_cores && !r.failed; ++i) run_group(r, cores, std::vector<int>{i});
        }
    } catch (std::exception &e) {
        r.failed = true;
        r.failure = std::string("the simulator failed: ") + e.what();
    }
    if (!r.failed) return 0;
    std::snprintf(error, error_len, "%s", r.failure.c_str());
    if (r.abandoned) owned.release();  // an abandoned kernel thread still refers to the run
    return -1;
}

}  // extern "C"
