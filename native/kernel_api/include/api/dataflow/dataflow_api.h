// The data-movement kernel API of TT-Metal 0.81.1 (api/dataflow/dataflow_api.h), host build: the same names and
// signatures for what reader and writer kernels use, running on the simulator. Every call takes its caller's file
// and line as hidden trailing defaults, for the errors it may raise.
#pragma once

#include <cstdint>
#include <type_traits>

#include "api/tensor/tensor_accessor.h"
#include "ktt_host/common.h"

// ---------------------------------------------------------------------------------------------- circular buffers
FORCE_INLINE void cb_reserve_back(int32_t operand, int32_t num_pages, KTT_SITE) {
    ::ktt::host::cb_reserve_back(operand, num_pages, KTT_HERE);
}
FORCE_INLINE void cb_push_back(const int32_t operand, const int32_t num_pages, KTT_SITE) {
    ::ktt::host::cb_push_back(operand, num_pages, KTT_HERE);
}
FORCE_INLINE void cb_wait_front(int32_t operand, int32_t num_pages, KTT_SITE) {
    ::ktt::host::cb_wait_front(operand, num_pages, KTT_HERE);
}
FORCE_INLINE void cb_pop_front(int32_t operand, int32_t num_pages, KTT_SITE) {
    ::ktt::host::cb_pop_front(operand, num_pages, KTT_HERE);
}
FORCE_INLINE bool cb_pages_reservable_at_back(int32_t operand, int32_t num_pages, KTT_SITE) {
    return ::ktt::host::cb_pages_reservable_at_back(operand, num_pages, KTT_HERE);
}
FORCE_INLINE bool cb_pages_available_at_front(int32_t operand, int32_t num_pages, KTT_SITE) {
    return ::ktt::host::cb_pages_available_at_front(operand, num_pages, KTT_HERE);
}
FORCE_INLINE uint32_t get_write_ptr(uint32_t operand, KTT_SITE) { return ::ktt::host::cb_write_ptr(operand, KTT_HERE); }
FORCE_INLINE uint32_t get_read_ptr(uint32_t operand, KTT_SITE) { return ::ktt::host::cb_read_ptr(operand, KTT_HERE); }
inline std::int32_t get_tile_size(const std::int32_t operand, KTT_SITE) {
    return static_cast<std::int32_t>(::ktt::host::cb_tile_size(operand, KTT_HERE));
}
inline uint32_t get_tile_hw(const std::int32_t operand, KTT_SITE) {
    ::ktt::host::cb_tile_size(operand, KTT_HERE);
    return 32 * 32;
}
inline uint32_t get_tile_num_faces(const std::int32_t operand, KTT_SITE) {
    ::ktt::host::cb_tile_size(operand, KTT_HERE);
    return 4;
}
inline DataFormat get_dataformat(const std::int32_t operand, KTT_SITE) {
    return ::ktt::host::cb_format(operand, KTT_HERE);
}

// ------------------------------------------------------------------------------------------------ NOC addresses
FORCE_INLINE uint64_t get_noc_addr(uint32_t noc_x, uint32_t noc_y, uint32_t addr, uint8_t noc = noc_index, KTT_SITE) {
    return ::ktt::host::noc_core_addr(noc_x, noc_y, addr, KTT_HERE);
}
FORCE_INLINE std::uint64_t get_noc_addr(std::uint32_t addr, uint8_t noc = noc_index, KTT_SITE) {
    return ::ktt::host::noc_local_addr(addr, KTT_HERE);
}
FORCE_INLINE uint64_t get_noc_multicast_addr(uint32_t noc_x_start, uint32_t noc_y_start, uint32_t noc_x_end,
                                             uint32_t noc_y_end, uint32_t addr, uint8_t noc = noc_index, KTT_SITE) {
    return ::ktt::host::noc_multicast_addr(noc_x_start, noc_y_start, noc_x_end, noc_y_end, addr, KTT_HERE);
}
template <bool DRAM>
FORCE_INLINE uint64_t get_noc_addr_from_bank_id(uint32_t bank_id, uint32_t bank_address_offset,
                                                uint8_t noc = noc_index, KTT_SITE) {
    return ::ktt::host::noc_bank_addr(DRAM, bank_id, bank_address_offset, KTT_HERE);
}

// Generic: any address generator with get_noc_addr(id, offset, noc).
template <typename AddrGen, typename = decltype(std::declval<const AddrGen &>().get_noc_addr(0u, 0u, uint8_t{0}))>
FORCE_INLINE uint64_t get_noc_addr(const uint32_t id, const AddrGen &addrgen, uint32_t offset = 0,
                                   uint8_t noc = noc_index, KTT_SITE) {
    return addrgen.get_noc_addr(id, offset, noc, ktt_file_, ktt_line_);
}

// ---------------------------------------------------------------------------------------------------- NOC reads
template <uint32_t max_page_size = NOC_MAX_BURST_SIZE + 1, bool enable_noc_tracing = true>
inline void noc_async_read(uint64_t src_noc_addr, uint32_t dst_local_l1_addr, uint32_t size, uint8_t noc = noc_index,
                           uint32_t read_req_vc = NOC_UNICAST_WRITE_VC, KTT_SITE) {
    ::ktt::host::noc_read(src_noc_addr, dst_local_l1_addr, size, "noc_async_read", KTT_HERE);
}

template <bool enable_noc_tracing = true>
FORCE_INLINE void noc_async_read_one_packet(uint64_t src_noc_addr, uint32_t dst_local_l1_addr, uint32_t size,
                                            uint8_t noc = noc_index, uint32_t read_req_vc = NOC_UNICAST_WRITE_VC,
                                            KTT_SITE) {
    if (size > NOC_MAX_BURST_SIZE)
        ::ktt::host::fail("noc_async_read_one_packet", "size is more than one NOC packet (NOC_MAX_BURST_SIZE)",
                          KTT_HERE);
    ::ktt::host::noc_read(src_noc_addr, dst_local_l1_addr, size, "noc_async_read_one_packet", KTT_HERE);
}

template <typename AddrGen, bool enable_noc_tracing = true>
FORCE_INLINE void noc_async_read_page(const uint32_t id, const AddrGen &addrgen, uint32_t dst_local_l1_addr,
                                      uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_read(addrgen.get_noc_addr(id, offset, noc, ktt_file_, ktt_line_), dst_local_l1_addr,
                          ::ktt::page_bytes(addrgen),
                          "noc_async_read_page", KTT_HERE);
}

template <typename AddrGen>
[[deprecated("Use <typename AddrGen> noc_async_read_page instead.")]] FORCE_INLINE void noc_async_read_tile(
    const uint32_t id, const AddrGen &addrgen, uint32_t dst_local_l1_addr, uint32_t offset = 0,
    uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_read(addrgen.get_noc_addr(id, offset, noc, ktt_file_, ktt_line_), dst_local_l1_addr,
                          ::ktt::page_bytes(addrgen),
                          "noc_async_read_tile", KTT_HERE);
}

FORCE_INLINE void noc_async_read_barrier(uint8_t noc = noc_index, KTT_SITE) { ::ktt::host::noc_barrier(1, KTT_HERE); }

// --------------------------------------------------------------------------------------------------- NOC writes
template <uint32_t max_page_size = NOC_MAX_BURST_SIZE + 1, bool enable_noc_tracing = true, bool posted = false>
inline void noc_async_write(uint32_t src_local_l1_addr, uint64_t dst_noc_addr, uint32_t size, uint8_t noc = noc_index,
                            uint32_t vc = NOC_UNICAST_WRITE_VC, KTT_SITE) {
    ::ktt::host::noc_write(src_local_l1_addr, dst_noc_addr, size, "noc_async_write", KTT_HERE);
}

template <bool enable_noc_tracing = true, bool posted = false>
FORCE_INLINE void noc_async_write_one_packet(uint32_t src_local_l1_addr, uint64_t dst_noc_addr, uint32_t size,
                                             uint8_t noc = noc_index, uint32_t vc = NOC_UNICAST_WRITE_VC, KTT_SITE) {
    if (size > NOC_MAX_BURST_SIZE)
        ::ktt::host::fail("noc_async_write_one_packet", "size is more than one NOC packet (NOC_MAX_BURST_SIZE)",
                          KTT_HERE);
    ::ktt::host::noc_write(src_local_l1_addr, dst_noc_addr, size, "noc_async_write_one_packet", KTT_HERE);
}

template <typename AddrGen, bool enable_noc_tracing = true, bool posted = false>
FORCE_INLINE void noc_async_write_page(const uint32_t id, const AddrGen &addrgen, uint32_t src_local_l1_addr,
                                       uint32_t size = 0, uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_write(src_local_l1_addr, addrgen.get_noc_addr(id, offset, noc, ktt_file_, ktt_line_),
                           size ? size : ::ktt::page_bytes(addrgen), "noc_async_write_page", KTT_HERE);
}

template <typename AddrGen>
[[deprecated("Use <typename AddrGen> noc_async_write_page instead.")]] FORCE_INLINE void noc_async_write_tile(
    const uint32_t id, const AddrGen &addrgen, uint32_t src_local_l1_addr, uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_write(src_local_l1_addr, addrgen.get_noc_addr(id, 0, noc, ktt_file_, ktt_line_),
                           ::ktt::page_bytes(addrgen), "noc_async_write_tile", KTT_HERE);
}

template <uint32_t max_page_size = NOC_MAX_BURST_SIZE + 1>
inline void noc_async_write_multicast(uint32_t src_local_l1_addr, uint64_t dst_noc_addr_multicast, uint32_t size,
                                      uint32_t num_dests, bool linked = false, uint8_t noc = noc_index,
                                      uint8_t vc = NOC_MULTICAST_WRITE_VC, KTT_SITE) {
    ::ktt::host::noc_write_multicast(src_local_l1_addr, dst_noc_addr_multicast, size, num_dests, false,
                                     "noc_async_write_multicast", KTT_HERE);
}

template <bool enable_noc_tracing = true>
FORCE_INLINE void noc_async_write_multicast_one_packet(std::uint32_t src_local_l1_addr,
                                                       std::uint64_t dst_noc_addr_multicast, std::uint32_t size,
                                                       std::uint32_t num_dests, bool linked = false,
                                                       uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_write_multicast(src_local_l1_addr, dst_noc_addr_multicast, size, num_dests, false,
                                     "noc_async_write_multicast_one_packet", KTT_HERE);
}

inline void noc_async_write_multicast_loopback_src(std::uint32_t src_local_l1_addr,
                                                   std::uint64_t dst_noc_addr_multicast, std::uint32_t size,
                                                   std::uint32_t num_dests, bool linked = false,
                                                   uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_write_multicast(src_local_l1_addr, dst_noc_addr_multicast, size, num_dests, true,
                                     "noc_async_write_multicast_loopback_src", KTT_HERE);
}

FORCE_INLINE void noc_async_writes_flushed(uint8_t noc = noc_index, KTT_SITE) { ::ktt::host::noc_barrier(2, KTT_HERE); }
FORCE_INLINE void noc_async_posted_writes_flushed(uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::noc_barrier(2, KTT_HERE);
}
FORCE_INLINE void noc_async_write_barrier(uint8_t noc = noc_index, KTT_SITE) { ::ktt::host::noc_barrier(6, KTT_HERE); }
FORCE_INLINE void noc_async_atomic_barrier(uint8_t noc_idx = noc_index, KTT_SITE) {
    ::ktt::host::noc_barrier(8, KTT_HERE);
}
FORCE_INLINE void noc_async_full_barrier(uint8_t noc_idx = noc_index, KTT_SITE) {
    ::ktt::host::noc_barrier(15, KTT_HERE);
}

enum class InlineWriteDst : uint8_t { DEFAULT = 0, L1 = 1, REG = 2 };

template <InlineWriteDst dst_type = InlineWriteDst::DEFAULT, bool posted = false, bool flush = true>
FORCE_INLINE void noc_inline_dw_write(uint64_t addr, uint32_t val, uint8_t be = 0xF, uint8_t noc = noc_index,
                                      uint8_t vc = NOC_UNICAST_WRITE_VC, uint32_t customized_src_addr = 0, KTT_SITE) {
    if (be != 0xF)
        ::ktt::host::fail("noc_inline_dw_write", "the host build writes whole words only (byte enable 0xF)", KTT_HERE);
    ::ktt::host::noc_inline_write(addr, val, KTT_HERE);
}

// --------------------------------------------------------------------------------------------------- semaphores
enum class ProgrammableCoreType : uint8_t { TENSIX = 0, ACTIVE_ETH = 1, IDLE_ETH = 2 };

template <ProgrammableCoreType type = ProgrammableCoreType::TENSIX>
FORCE_INLINE uintptr_t get_semaphore(uint32_t semaphore_id, KTT_SITE) {
    static_assert(type == ProgrammableCoreType::TENSIX, "the host build simulates Tensix cores only");
    return ::ktt::host::semaphore_addr(semaphore_id, KTT_HERE);
}

FORCE_INLINE void noc_semaphore_wait(volatile tt_l1_ptr uint32_t *sem_addr, uint32_t val, KTT_SITE) {
    ::ktt::host::semaphore_wait(sem_addr, val, false, KTT_HERE);
}
FORCE_INLINE void noc_semaphore_wait_min(volatile tt_l1_ptr uint32_t *sem_addr, uint32_t val, KTT_SITE) {
    ::ktt::host::semaphore_wait(sem_addr, val, true, KTT_HERE);
}
FORCE_INLINE void noc_semaphore_set(volatile tt_l1_ptr uint32_t *sem_addr, uint32_t val, KTT_SITE) {
    ::ktt::host::semaphore_set(sem_addr, val, KTT_HERE);
}
template <bool posted = false>
FORCE_INLINE void noc_semaphore_inc(uint64_t addr, uint32_t incr, uint8_t noc_id = noc_index,
                                    uint8_t vc = NOC_UNICAST_WRITE_VC, KTT_SITE) {
    ::ktt::host::semaphore_inc(addr, incr, KTT_HERE);
}
inline void noc_semaphore_set_remote(std::uint32_t src_local_l1_addr, std::uint64_t dst_noc_addr,
                                     uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::semaphore_set_remote(src_local_l1_addr, dst_noc_addr, KTT_HERE);
}
inline void noc_semaphore_set_multicast(uint32_t src_local_l1_addr, uint64_t dst_noc_addr_multicast,
                                        uint32_t num_dests, bool linked = false, uint8_t noc = noc_index,
                                        uint8_t vc = NOC_MULTICAST_WRITE_VC, KTT_SITE) {
    ::ktt::host::semaphore_set_multicast(src_local_l1_addr, dst_noc_addr_multicast, num_dests, false, KTT_HERE);
}
inline void noc_semaphore_set_multicast_loopback_src(uint32_t src_local_l1_addr, uint64_t dst_noc_addr_multicast,
                                                     uint32_t num_dests, bool linked = false,
                                                     uint8_t noc = noc_index, KTT_SITE) {
    ::ktt::host::semaphore_set_multicast(src_local_l1_addr, dst_noc_addr_multicast, num_dests, true, KTT_HERE);
}
