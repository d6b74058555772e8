// Interleaved address generators and TensorAccessor (0.81.1's api/tensor/tensor_accessor.h and the address
// generators of internal/dataflow/dataflow_api_addrgen.h), host build. Pages of an interleaved buffer go round the
// banks: page id lives in bank id % banks at bank_base_address + (id / banks) * the page size aligned to the bank's
// alignment (DRAM 64 B, L1 16 B); InterleavedAddrGenFast strides by the tile size of its data format. Sharded
// accessors are not in the host build: a kernel that uses one fails to compile, naming it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "api/tensor/tensor_accessor_args.h"
#include "ktt_host/common.h"

namespace ktt {
inline uint32_t tile_bytes_of(DataFormat f) {
    switch (f) {
    case DataFormat::Float32:
    case DataFormat::Int32:
    case DataFormat::UInt32: return 4096;
    case DataFormat::Float16:
    case DataFormat::Float16_b:
    case DataFormat::UInt16: return 2048;
    case DataFormat::Bfp8_b: return 1088;
    case DataFormat::Bfp4_b: return 576;
    case DataFormat::UInt8:
    case DataFormat::Int8: return 1024;
    default: return 0;
    }
}

inline uint32_t align_up(uint32_t n, uint32_t a) { return (n + a - 1) / a * a; }

// The bytes a page transfer moves, as 0.81.1 picks them: get_aligned_page_size(), else page_size, else
// 1 << log_base_2_of_page_size.
template <typename T, typename = void>
inline constexpr bool has_aligned_page_size_v = false;
template <typename T>
inline constexpr bool has_aligned_page_size_v<T, std::void_t<decltype(std::declval<const T &>().get_aligned_page_size())>> = true;
template <typename T, typename = void>
inline constexpr bool has_page_size_v = false;
template <typename T>
inline constexpr bool has_page_size_v<T, std::void_t<decltype(std::declval<const T &>().page_size)>> = true;

template <typename AddrGen>
inline uint32_t page_bytes(const AddrGen &g) {
    if constexpr (has_aligned_page_size_v<AddrGen>) {
        return g.get_aligned_page_size();
    } else if constexpr (has_page_size_v<AddrGen>) {
        return g.page_size;
    } else {
        return 1u << g.log_base_2_of_page_size;
    }
}

template <bool DRAM>
inline uint64_t interleaved_page_addr(uint32_t base, uint32_t stride, uint32_t id, uint32_t offset, host::Site at) {
    const uint32_t banks = host::num_banks(DRAM);
    return host::noc_bank_addr(DRAM, id % banks, base + (id / banks) * stride + offset, at);
}
}  // namespace ktt

template <bool DRAM>
struct InterleavedAddrGen {
    static constexpr bool is_dram = DRAM;
    uint32_t bank_base_address;
    const uint32_t page_size;
    const uint32_t aligned_page_size = ::ktt::align_up(page_size, DRAM ? DRAM_ALIGNMENT : L1_ALIGNMENT);

    std::uint64_t get_noc_addr(const uint32_t id, const uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) const {
        return ::ktt::interleaved_page_addr<DRAM>(bank_base_address, aligned_page_size, id, offset, KTT_HERE);
    }
};

template <bool DRAM, uint32_t tile_hw = 1024>
struct InterleavedAddrGenFast {
    static_assert(tile_hw == 1024, "the host build has 32 x 32 tiles only");
    static constexpr bool is_dram = DRAM;
    uint32_t bank_base_address;
    uint32_t page_size;
    DataFormat data_format;

    std::uint64_t get_noc_addr(const uint32_t id, const uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) const {
        return ::ktt::interleaved_page_addr<DRAM>(bank_base_address, ::ktt::tile_bytes_of(data_format), id, offset,
                                                  KTT_HERE);
    }
};

template <bool DRAM>
struct InterleavedPow2AddrGen {
    static constexpr bool is_dram = DRAM;
    const uint32_t bank_base_address;
    const uint32_t log_base_2_of_page_size;

    std::uint64_t get_noc_addr(const uint32_t id, const uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) const {
        const uint32_t stride = ::ktt::align_up(1u << log_base_2_of_page_size, DRAM ? DRAM_ALIGNMENT : L1_ALIGNMENT);
        return ::ktt::interleaved_page_addr<DRAM>(bank_base_address, stride, id, offset, KTT_HERE);
    }
};

template <bool DRAM>
struct InterleavedPow2AddrGenFast {
    static constexpr bool is_dram = DRAM;
    uint32_t bank_base_address;
    const uint32_t log_base_2_of_page_size;

    std::uint64_t get_noc_addr(const uint32_t id, const uint32_t offset = 0, uint8_t noc = noc_index, KTT_SITE) const {
        const uint32_t stride = ::ktt::align_up(1u << log_base_2_of_page_size, DRAM ? DRAM_ALIGNMENT : L1_ALIGNMENT);
        return ::ktt::interleaved_page_addr<DRAM>(bank_base_address, stride, id, offset, KTT_HERE);
    }
};

namespace tensor_accessor {
template <bool IsDram>
struct InterleavedSpec {
    static constexpr bool is_dram = IsDram;
};
}  // namespace tensor_accessor

template <typename DSpec>
struct TensorAccessor : public InterleavedAddrGen<DSpec::is_dram> {
    template <std::size_t CTA_OFFSET, std::size_t CRTA_OFFSET>
    TensorAccessor(const TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET> &args, const uint32_t bank_base_address_in,
                   const uint32_t page_size_in = TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET>{}.get_aligned_page_size())
        : InterleavedAddrGen<DSpec::is_dram>{bank_base_address_in, page_size_in}, aligned_page_size(page_size_in) {}

    uint32_t get_aligned_page_size() const { return aligned_page_size; }
    constexpr uint32_t get_bank_base_address() const { return this->bank_base_address; }

   private:
    const uint32_t aligned_page_size = 0;
};

template <std::size_t CTA_OFFSET, std::size_t CRTA_OFFSET>
TensorAccessor(const TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET> &args, size_t)
    -> TensorAccessor<tensor_accessor::InterleavedSpec<TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET>::is_dram>>;
template <std::size_t CTA_OFFSET, std::size_t CRTA_OFFSET>
TensorAccessor(const TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET> &args, size_t, uint32_t)
    -> TensorAccessor<tensor_accessor::InterleavedSpec<TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET>::is_dram>>;
