// The torch glue for the "tt" device: a c10 allocator, a device guard and PrivateUse1 hooks.
// Everything device-side is decided in Python (the HAL): this file forwards to the typed entry points of
// ktt_torch_hal (ktt_torch.h), so torch and tinygrad share one allocator and one set of statistics. Built against the
// installed torch's headers only.
#include "ktt_torch.h"

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
#include <array>
#include <atomic>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <type_traits>
#include <unordered_set>
#include <vector>

namespace {

ktt_torch_hal g_hal{};
std::atomic<bool> g_installed{false};
thread_local std::string g_error;
thread_local c10::DeviceIndex g_device = 0;
thread_local int64_t g_stream[64] = {0};  // kMaxDevices

bool installed() { return g_installed.load(std::memory_order_acquire); }

// Calls the HAL entry point `fn` and raises the error it reported, if any (as an out-of-memory error when `Oom`).
template <bool Oom = false, typename R, typename... P, typename... A>
R call(R (*fn)(P...), A... args) {
  TORCH_CHECK(installed() && fn != nullptr, "the tt device is not initialised: import kohakutt first");
  g_error.clear();
  auto raise_reported = [] {
    if (!g_error.empty()) {
      std::string msg = g_error;
      g_error.clear();
      if constexpr (Oom) {
        TORCH_CHECK_WITH(OutOfMemoryError, false, msg);
      }
      TORCH_CHECK(false, msg);
    }
  };
  if constexpr (std::is_void_v<R>) {
    fn(static_cast<P>(args)...);
    raise_reported();
  } else {
    R r = fn(static_cast<P>(args)...);
    raise_reported();
    return r;
  }
}

// Frees are handed to Python later, not called back from the deleter: a deleter can run while Python unwinds an
// exception (a temporary dies), when running Python code would lose that exception.
std::mutex g_free_mu;
std::vector<int64_t> g_frees;
std::atomic<int64_t> g_nfrees{0};

void delete_tt(void* ptr) {
  if (ptr != nullptr && installed()) {
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
    void* ptr = reinterpret_cast<void*>(call<true>(g_hal.alloc, g_device, static_cast<int64_t>(nbytes)));
    return {ptr, ptr, &delete_tt, dev};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &delete_tt; }
  void copy_data(void* dest, const void* src, std::size_t count) const final {
    call(g_hal.copy, reinterpret_cast<int64_t>(dest), reinterpret_cast<int64_t>(src), static_cast<int64_t>(count));
  }
  bool initialized() override { return installed(); }
  void emptyCache(c10::MempoolId_t) override { call(g_hal.empty_cache); }
  void recordStream(const c10::DataPtr&, c10::Stream) override {}  // frees are already ordered on the stream
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    c10::CachingDeviceAllocator::DeviceStats s;
    auto& alloc = s.allocated_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    auto& resv = s.reserved_bytes[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    auto& count = s.allocation[static_cast<size_t>(c10::CachingDeviceAllocator::StatType::AGGREGATE)];
    int64_t v[6] = {0};
    call(g_hal.memory_stats, device, v);
    alloc.current = v[0];
    alloc.peak = v[1];
    resv.current = v[2];
    resv.peak = v[3];
    count.allocated = v[4];
    count.freed = v[5];
    count.current = count.allocated - count.freed;
    return s;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override { call(g_hal.reset_accumulated, device); }
  void resetPeakStats(c10::DeviceIndex device) override { call(g_hal.reset_peak, device); }
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    int64_t v[2] = {0};
    call(g_hal.memory_info, device, v);
    return {static_cast<size_t>(v[0]), static_cast<size_t>(v[1])};
  }
};

TTAllocator g_allocator;

// Memory on tt:<index> whatever the current device (the allocator allocates on the current one).
c10::DataPtr allocate_on(c10::DeviceIndex index, size_t nbytes) {
  struct Restore {
    c10::DeviceIndex prev;
    ~Restore() { g_device = prev; }
  } restore{g_device};
  if (index >= 0) g_device = index;
  return g_allocator.allocate(nbytes);
}

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
    return c10::Stream(c10::Stream::UNSAFE, c10::Device(kType, i), call(g_hal.stream_new, i));
  }
  c10::Stream getStreamFromGlobalPool(c10::Device d, bool) const override { return getNewStream(d, 0); }
  c10::Stream exchangeStream(c10::Stream s) const override {
    auto i = s.device_index();
    c10::Stream old(c10::Stream::UNSAFE, c10::Device(kType, i), g_stream[i]);
    g_stream[i] = s.id();
    return old;
  }
  c10::DeviceIndex deviceCount() const noexcept override {  // noexcept: an error counts no devices
    if (!installed() || g_hal.device_count == nullptr) return 0;
    auto n = g_hal.device_count();
    bool failed = !g_error.empty();
    g_error.clear();
    return failed ? 0 : static_cast<c10::DeviceIndex>(n);
  }
  void record(void** event, const c10::Stream& s, const c10::DeviceIndex device, const c10::EventFlag) const override {
    auto id = call(g_hal.event_record, reinterpret_cast<int64_t>(*event), device < 0 ? s.device_index() : device,
                   s.id());
    *event = reinterpret_cast<void*>(id);
  }
  void block(void* event, const c10::Stream& s) const override {
    if (event) call(g_hal.event_block, reinterpret_cast<int64_t>(event), s.device_index(), s.id());
  }
  bool queryEvent(void* event) const override {
    return event == nullptr || call(g_hal.event_query, reinterpret_cast<int64_t>(event)) != 0;
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {  // noexcept: errors dropped
    if (event && installed() && g_hal.event_destroy != nullptr) {
      g_hal.event_destroy(reinterpret_cast<int64_t>(event));
      g_error.clear();
    }
  }
  void synchronizeEvent(void* event) const override {
    if (event) call(g_hal.event_synchronize, reinterpret_cast<int64_t>(event));
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    TORCH_CHECK(start && end, "both events must be recorded before elapsed_time");
    return call(g_hal.event_elapsed_ms, reinterpret_cast<int64_t>(start), reinterpret_cast<int64_t>(end));
  }
  bool queryStream(const c10::Stream& s) const override {
    return call(g_hal.stream_query, s.device_index(), s.id()) != 0;
  }
  void synchronizeStream(const c10::Stream& s) const override {
    call(g_hal.stream_synchronize, s.device_index(), s.id());
  }
  void synchronizeDevice(const c10::DeviceIndex device) const override { call(g_hal.device_synchronize, device); }
  void recordDataPtrOnStream(const c10::DataPtr&, const c10::Stream&) const override {}
};

// torch.Generator(device="tt"): a Philox stream, (seed, offset) with the offset counted in the stream's 128-bit
// blocks. The draws are made in Python, which reads and advances the offset (initial_seed / get_offset / set_offset);
// the state is 16 bytes, seed then offset, little-endian, as torch.tt.get_rng_state's. A chip's default generator
// holds no state of its own: it reads and writes the chip's random stream (generator_get / _set), the one that random
// ops without a generator draw from, so saving and restoring it replays those draws.
struct TTGenerator final : public c10::GeneratorImpl {
  TTGenerator(c10::DeviceIndex d, bool chip_stream)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, d),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
        chip_stream_(chip_stream) {}
  void set_current_seed(uint64_t seed) override { put(seed, 0); }
  void set_offset(uint64_t offset) override { put(current_seed(), offset); }
  uint64_t get_offset() const override { return chip_stream_ ? chip_state()[1] : offset_; }
  uint64_t current_seed() const override { return chip_stream_ ? chip_state()[0] : seed_; }
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
  std::array<uint64_t, 2> chip_state() const {
    std::array<uint64_t, 2> state{0, 0};
    call(g_hal.generator_get, device().index(), state.data());
    return state;
  }
  void put(uint64_t seed, uint64_t offset) {
    if (chip_stream_) {
      call(g_hal.generator_set, device().index(), seed, offset);
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
  bool isAvailable() const override { return installed(); }
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
    c10::DataPtr fresh = allocate_on(impl->device().index(), newsize);  // the storage's device, not the current one
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

void ktt_torch_install(const ktt_torch_hal* hal) {
  g_hal = *hal;
  g_installed.store(true, std::memory_order_release);
  if (g_hooks == nullptr) {
    c10::SetAllocator(c10::DeviceType::PrivateUse1, &g_allocator);
    g_hooks = new TTHooks();
    at::RegisterPrivateUse1HooksInterface(g_hooks);
  }
}

void ktt_torch_set_error(const char* message) { g_error = message ? message : "unknown error"; }

void ktt_torch_uninstall() { g_installed.store(false, std::memory_order_release); }

int32_t ktt_torch_current_device() { return g_device; }

int64_t ktt_torch_pending_frees() { return g_nfrees.load(std::memory_order_acquire); }

int64_t ktt_torch_take_frees(int64_t* out, int64_t cap) {
  std::lock_guard<std::mutex> lock(g_free_mu);
  int64_t n = std::min<int64_t>(cap, static_cast<int64_t>(g_frees.size()));
  std::copy(g_frees.begin(), g_frees.begin() + n, out);
  g_frees.erase(g_frees.begin(), g_frees.begin() + n);
  g_nfrees.store(static_cast<int64_t>(g_frees.size()), std::memory_order_release);
  return n;
}

// torch's own empty-tensor helper makes every tensor on tt:0: this moves one to its storage's device.
int32_t ktt_torch_adopt_storage(void* tensor, void* storage) {
  try {
    auto* s = static_cast<c10::StorageImpl*>(storage);
    static_cast<c10::TensorImpl*>(tensor)->set_storage_keep_dtype(
        c10::Storage(c10::intrusive_ptr<c10::StorageImpl>::reclaim_copy(s)));
    return 0;
  } catch (...) {
    return -1;
  }
}

int64_t ktt_torch_current_stream(int32_t device) { return g_stream[device]; }

void ktt_torch_next_generator_is_default() { g_next_is_default = true; }

// The fast way to make an op's output: no allocator callback, no Python storage object. The storage's death reaches
// Python like any tt storage's (see delete_tt).
int32_t ktt_torch_set_buffer(void* tensor, int64_t ptr, int64_t nbytes, int32_t device, int64_t ndim,
                             const int64_t* dims) {
  try {
    auto* t = static_cast<c10::TensorImpl*>(tensor);
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
