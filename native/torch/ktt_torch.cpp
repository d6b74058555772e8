// The torch glue for the "tt" device: a c10 allocator, a device guard and PrivateUse1 hooks.
// Everything device-side is decided in Python (the HAL): this file forwards to one callback, so torch and
// tinygrad share one allocator and one set of statistics. Built against the installed torch's headers only.
#include <ATen/EmptyTensor.h>
#include <ATen/core/Generator.h>
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/Storage.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace {

enum Op : int32_t {
  ALLOC = 1, FREE = 2, COPY = 3, SYNC_DEVICE = 4, STREAM_SYNC = 5, STREAM_QUERY = 6, EVENT_RECORD = 7,
  EVENT_BLOCK = 8, EVENT_QUERY = 9, EVENT_SYNC = 10, EVENT_DESTROY = 11, EVENT_ELAPSED_US = 12, DEVICE_COUNT = 13,
  STATS = 14, RESET_PEAK = 15, EMPTY_CACHE = 16, MEMORY_INFO = 17, NEW_STREAM = 18, RESET_ACCUMULATED = 19,
  RNG_GET = 20, RNG_SET = 21,
};

using Callback = int64_t (*)(int32_t op, int64_t a, int64_t b, int64_t c, int64_t d);
Callback g_cb = nullptr;
thread_local std::string g_error;
thread_local c10::DeviceIndex g_device = 0;
thread_local int64_t g_stream[64] = {0};  // kMaxDevices

int64_t call(Op op, int64_t a = 0, int64_t b = 0, int64_t c = 0, int64_t d = 0) {
  TORCH_CHECK(g_cb != nullptr, "the tt device is not initialised: import kohakutt.torch first");
  g_error.clear();
  int64_t r = g_cb(op, a, b, c, d);
  if (!g_error.empty()) {
    std::string msg = g_error;
    g_error.clear();
    if (op == ALLOC) {
      TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
    }
    TORCH_CHECK(false, msg);
  }
  return r;
}

// Frees are handed to Python later, not called back from the deleter: a deleter can run while Python unwinds an
// exception (a temporary dies), when running Python code would lose that exception.
std::mutex g_free_mu;
std::vector<int64_t> g_frees;
std::atomic<int64_t> g_nfrees{0};

void delete_tt(void* ptr) {
  if (ptr != nullptr && g_cb != nullptr) {
    std::lock_guard<std::mutex> lock(g_free_mu);
    g_frees.push_back(reinterpret_cast<int64_t>(ptr));
    g_nfrees.store(static_cast<int64_t>(g_frees.size()), std::memory_order_release);
  }
}

struct TTAllocator final : public c10::DeviceAllocator {
  c10::DataPtr allocate(size_t nbytes) override {
    c10::Device dev(c10::DeviceType::PrivateUse1, g_device);
    if (nbytes == 0) {
      return {nullptr, nullptr, &delete_tt, dev};
    }
    void* ptr = reinterpret_cast<void*>(call(ALLOC, g_device, static_cast<int64_t>(nbytes)));
    return {ptr, ptr, &delete_tt, dev};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_tt; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    call(COPY, reinterpret_cast<int64_t>(dest), reinterpret_cast<int64_t>(src), static_cast<int64_t>(count));
  }
  bool initialized() override { return g_cb != nullptr; }
  void emptyCache(c10::MempoolId_t) override { call(EMPTY_CACHE); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // frees are already ordered on the stream
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats s;
    auto& alloc = s.allocated_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    auto& resv = s.reserved_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    auto& count = s.allocation[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    alloc.current = call(STATS, device, 0);
    alloc.peak = call(STATS, device, 1);
    resv.current = call(STATS, device, 2);
    resv.peak = call(STATS, device, 3);
    count.allocated = call(STATS, device, 4);
    count.freed = call(STATS, device, 5);
    count.current = count.allocated - count.freed;
    return s;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { call(RESET_ACCUMULATED, device); }
  void resetPeakStats(c10::DeviceIndex device) override { call(RESET_PEAK, device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    return {static_cast<size_t>(call(MEMORY_INFO, device, 0)), static_cast<size_t>(call(MEMORY_INFO, device, 1))};
  }
};

TTAllocator g_allocator;

// "Pinned" host memory: ordinary CPU memory, remembered so that is_pinned() answers true for it.
std::mutex g_pinned_mu;
std::unordered_set<const void*> g_pinned;

void delete_pinned(void* ptr) {
  {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    g_pinned.erase(ptr);
  }
  c10::free_cpu(ptr);
}

struct PinnedAllocator final : public c10::Allocator {
  c10::DataPtr allocate(size_t nbytes) override {
    void* ptr = nbytes ? c10::alloc_cpu(nbytes) : nullptr;
    if (ptr) {
      std::lock_guard<std::mutex> lock(g_pinned_mu);
      g_pinned.insert(ptr);
    }
    return {ptr, ptr, &delete_pinned, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_pinned; }
  void copy_data(void* dest, const void* src, std::size_t count) const final { std::memcpy(dest, src, count); }
};

PinnedAllocator g_pinned_allocator;

struct TTGuard final : public c10::impl::DeviceGuardImplInterface {
  static constexpr c10::DeviceType kType = c10::DeviceType::PrivateUse1;
  c10::DeviceType type() const override { return kType; }
  c10::Device exchangeDevice(c10::Device d) const override {
    c10::Device old(kType, g_device);
    g_device = d.index() < 0 ? 0 : d.index();
    return old;
  }
  c10::Device getDevice() const override { return {kType, g_device}; }
  void setDevice(c10::Device d) const override { g_device = d.index() < 0 ? 0 : d.index(); }
  void uncheckedSetDevice(c10::Device d) const noexcept override { g_device = d.index() < 0 ? 0 : d.index(); }
  c10::Stream getStream(c10::Device d) const override {
    auto i = d.index() < 0 ? g_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, i), g_stream[i]);
  }
  c10::Stream getDefaultStream(c10::Device d) const override {
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, d.index() < 0 ? g_device : d.index()), 0);
  }
  c10::Stream getNewStream(c10::Device d, int) const override {
    auto i = d.index() < 0 ? g_device : d.index();
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, i), call(NEW_STREAM, i));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto i = s.device_index();
    c10::Stream old(c10::Stream::UNSAFE, c10::Device(kType, i), g_stream[i]);
    g_stream[i] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    if (g_cb == nullptr) return 0;
    return static_cast<c10::DeviceIndex>(g_cb(DEVICE_COUNT, 0, 0, 0, 0));
  }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device, const c10::EventFlag) const override {
    auto id = call(EVENT_RECORD, reinterpret_cast<int64_t>(*event), device < 0 ? s.device_index() : device, s.id());
    *event = reinterpret_cast<void*>(id);
  }
  void block(void* event, const c10::Stream& s) const override {
    if (event) call(EVENT_BLOCK, reinterpret_cast<int64_t>(event), s.device_index(), s.id());
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || call(EVENT_QUERY, reinterpret_cast<int64_t>(event)) != 0;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    if (event && g_cb) g_cb(EVENT_DESTROY, reinterpret_cast<int64_t>(event), 0, 0, 0);
  }
  void synchronizeEvent(void* event) const override {
    if (event) call(EVENT_SYNC, reinterpret_cast<int64_t>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before elapsed_time");
    return static_cast<double>(call(EVENT_ELAPSED_US, reinterpret_cast<int64_t>(start),
                                    reinterpret_cast<int64_t>(end))) / 1000.0;
  }
  bool queryStream(const c10::Stream& s) const override {
    return call(STREAM_QUERY, s.device_index(), s.id()) != 0;
  }
  void synchronizeStream(const c10::Stream& s) const override { call(STREAM_SYNC, s.device_index(), s.id()); }
  void synchronizeDevice(const c10::DeviceIndex device) const override { call(SYNC_DEVICE, device); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

// torch.Generator(device="tt"): a Philox stream, (seed, offset) with the offset counted in the stream's 128-bit
// blocks. The draws are made in Python, which reads and advances the offset (initial_seed / get_offset / set_offset);
// the state is 16 bytes, seed then offset, little-endian, as torch.tt.get_rng_state's. A chip's default generator
// holds no state of its own: it reads and writes the chip's random stream (RNG_GET / RNG_SET), the one that random
// ops without a generator draw from, so saving and restoring it replays those draws.
struct TTGenerator final : public c10::GeneratorImpl {
  TTGenerator(c10::DeviceIndex d, bool chip_stream)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, d),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        chip_stream_(chip_stream) {}
  void set_current_seed(uint64_t seed) override { put(seed, 0); }
  void set_offset(uint64_t offset) override { put(current_seed(), offset); }
  uint64_t get_offset() const override {
    return chip_stream_ ? static_cast<uint64_t>(call(RNG_GET, device().index(), 1)) : offset_;
  }
  uint64_t current_seed() const override {
    return chip_stream_ ? static_cast<uint64_t>(call(RNG_GET, device().index(), 0)) : seed_;
  }
  uint64_t seed() override {
    std::random_device rd;
    uint64_t s = (static_cast<uint64_t>(rd()) << 32) | rd();
    set_current_seed(s);
    return s;
  }
  void set_state(const c10::TensorImpl& state) override {
    TORCH_CHECK(state.dtype() == caffe2::TypeMeta::Make<uint8_t>() && state.numel() == 16 && state.is_contiguous(),
                "a tt generator state is 16 bytes (a uint8 tensor from get_state()), got ", state.numel(), " of ",
                state.dtype().name());
    const auto* p = static_cast<const uint8_t*>(state.data());
    uint64_t seed = 0, offset = 0;
    std::memcpy(&seed, p, 8);
    std::memcpy(&offset, p + 8, 8);
    put(seed, offset);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    at::TensorBase t = at::detail::empty_cpu({16}, c10::ScalarType::Byte, std::nullopt, std::nullopt, std::nullopt,
                                             std::nullopt);
    auto* p = static_cast<uint8_t*>(t.data_ptr());
    uint64_t seed = current_seed(), offset = get_offset();
    std::memcpy(p, &seed, 8);
    std::memcpy(p + 8, &offset, 8);
    return t.getIntrusivePtr();
  }
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

 private:
  void put(uint64_t seed, uint64_t offset) {
    if (chip_stream_) {
      call(RNG_SET, device().index(), static_cast<int64_t>(seed), static_cast<int64_t>(offset));
    } else {
      seed_ = seed;
      offset_ = offset;
    }
  }
  TTGenerator* clone_impl() const override {  // a copy of the state, never the chip's stream itself
    auto* g = new TTGenerator(device().index(), false);
    g->seed_ = current_seed();
    g->offset_ = get_offset();
    return g;
  }
  bool chip_stream_;
  uint64_t seed_ = 67280421310721ULL;  // torch's default seed
  uint64_t offset_ = 0;
};

constexpr int kMaxDevices = 64;
std::mutex g_default_gen_mu;
at::Generator g_default_gens[kMaxDevices];
thread_local bool g_next_is_default = false;

struct TTHooks final : public at::PrivateUse1HooksInterface {
  at::Generator getNewGenerator(c10::DeviceIndex d) const override {
    if (g_next_is_default) {  // torch.tt.default_generators: a Python handle on the chip's default generator
      g_next_is_default = false;
      return getDefaultGenerator(d);
    }
    return at::make_generator<TTGenerator>(d < 0 ? g_device : d, false);
  }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex d) const override {
    auto i = d < 0 ? g_device : d;
    TORCH_CHECK(i < kMaxDevices, "tt:", static_cast<int>(i), " is beyond the ", kMaxDevices, " devices the glue holds");
    std::lock_guard<std::mutex> lock(g_default_gen_mu);
    if (!g_default_gens[i].defined()) g_default_gens[i] = at::make_generator<TTGenerator>(i, true);
    return g_default_gens[i];
  }
  bool isBuilt() const override { return true; }
  bool isAvailable() const override { return g_cb != nullptr; }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return TTGuard().deviceCount(); }
  void setCurrentDevice(c10::DeviceIndex d) const override { g_device = d; }
  c10::DeviceIndex getCurrentDevice() const override { return g_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex d) const override {
    auto old = g_device;
    g_device = d;
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex d) const override { return exchangeDevice(d); }
  bool isPinnedPtr(const void* data) const override {
    std::lock_guard<std::mutex> lock(g_pinned_mu);
    return g_pinned.count(data) != 0;
  }
  c10::Allocator* getPinnedMemoryAllocator() const override { return &g_pinned_allocator; }
  c10::Device getDeviceFromPtr(void*) const override { return {c10::DeviceType::PrivateUse1, g_device}; }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t newsize) const override {
    auto* impl = storage.unsafeGetStorageImpl();
    size_t old = impl->nbytes();
    c10::DataPtr fresh = g_allocator.allocate(newsize);
    size_t keep = std::min(old, newsize);
    if (keep && impl->data()) g_allocator.copy_data(fresh.get(), impl->data(), keep);
    impl->set_data_ptr_noswap(std::move(fresh));
    impl->set_nbytes(newsize);
  }
};

TTHooks* g_hooks = nullptr;

}  // namespace

C10_REGISTER_GUARD_IMPL(PrivateUse1, TTGuard);

extern "C" {

// Installs the allocator and hooks and routes them to `cb`. Safe to call again to replace the callback.
void ktt_torch_install(Callback cb) {
  g_cb = cb;
  if (g_hooks == nullptr) {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
    g_hooks = new TTHooks();
    at::RegisterPrivateUse1HooksInterface(g_hooks);
  }
}

// Called by the Python callback before it returns, to make the C++ side raise `msg`.
void ktt_torch_set_error(const char* msg) { g_error = msg ? msg : "unknown error"; }

// Detaches the callback (at interpreter exit): later frees become no-ops.
void ktt_torch_uninstall() { g_cb = nullptr; }

int ktt_torch_current_device() { return g_device; }

// How many storages died since the last ktt_torch_take_frees (cheap: no lock).
int64_t ktt_torch_pending_frees() { return g_nfrees.load(std::memory_order_acquire); }

// Moves up to `cap` data pointers of dead storages into `out`, oldest first; returns how many.
int64_t ktt_torch_take_frees(int64_t* out, int64_t cap) {
  std::lock_guard<std::mutex> lock(g_free_mu);
  int64_t n = std::min<int64_t>(cap, static_cast<int64_t>(g_frees.size()));
  std::copy(g_frees.begin(), g_frees.begin() + n, out);
  g_frees.erase(g_frees.begin(), g_frees.begin() + n);
  g_nfrees.store(static_cast<int64_t>(g_frees.size()), std::memory_order_release);
  return n;
}

// Puts storage `storage` (a StorageImpl*) under tensor `impl` (a TensorImpl*), which takes the storage's device:
// torch's own empty-tensor helper makes every tensor on tt:0. Returns 0, or -1 when the tensor refuses.
int ktt_torch_adopt_storage(void* impl, void* storage) {
  try {
    auto* s = static_cast<c10::StorageImpl*>(storage);
    static_cast<c10::TensorImpl*>(impl)->set_storage_keep_dtype(
        c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s)));
    return 0;
  } catch (...) {
    return -1;
  }
}
int64_t ktt_torch_current_stream(int device) { return g_stream[device]; }

// The next torch.Generator(device="tt:<i>") made by this thread is tt:<i>'s default generator (not a new one).
void ktt_torch_next_generator_is_default() { g_next_is_default = true; }

// Gives the fresh tensor `impl` (a TensorImpl*) a new storage of `nbytes` over device memory `ptr` on tt:<device>,
// which the caller allocated (its death reaches Python like any tt storage's: see delete_tt), then sizes and strides
// (`dims`: ndim sizes, then ndim strides) at storage offset 0. The fast way to make an op's output: no allocator
// callback, no Python storage object. Returns 0, or -1 when the tensor refuses (nothing is taken over then).
int ktt_torch_set_buffer(void* impl, int64_t ptr, int64_t nbytes, int device, int64_t ndim, const int64_t* dims) {
  try {
    auto* t = static_cast<c10::TensorImpl*>(impl);
    c10::Device dev(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device));
    void* p = reinterpret_cast<void*>(ptr);
    c10::Storage storage(c10::Storage::use_byte_size_t(), static_cast<size_t>(nbytes),
                         c10::DataPtr(p, p, &delete_tt, dev), &g_allocator, /*resizable=*/true);
    t->set_storage_keep_dtype(std::move(storage));
    t->set_sizes_and_strides(c10::IntArrayRef(dims, ndim), c10::IntArrayRef(dims + ndim, ndim), 0);
    return 0;
  } catch (...) {
    return -1;
  }
}
}
