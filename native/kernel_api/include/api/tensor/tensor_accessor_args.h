// TensorAccessorArgs<CTA_OFFSET, CRTA_OFFSET> (0.81.1's api/tensor/tensor_accessor_args.h), host build, for
// interleaved tensors: the host appends [args_config, aligned page size] to the kernel's compile-time args
// (TensorAccessorArgs(buffer).get_compile_time_args()), or [args_config] with the page size as a common runtime arg
// when ArgConfig::RuntimePageSize is set. Sharded tensors are not in the host build (a static_assert names it).
#pragma once

#include <cstddef>
#include <cstdint>

#include "api/compile_time_args.h"
#include "ktt_host/common.h"

namespace tensor_accessor {
inline constexpr std::size_t UNKNOWN = static_cast<std::size_t>(-1);

enum class ArgConfig : uint8_t {
    None = 0,
    Sharded = 1 << 0,
    IsDram = 1 << 1,
    RuntimeRank = 1 << 2,
    RuntimeNumBanks = 1 << 3,
    RuntimeTensorShape = 1 << 4,
    RuntimeShardShape = 1 << 5,
    RuntimeBankCoords = 1 << 6,
    RuntimePageSize = 1 << 7,
};
}  // namespace tensor_accessor

template <std::size_t CTA_OFFSET, std::size_t CRTA_OFFSET = tensor_accessor::UNKNOWN>
struct TensorAccessorArgs {
    static constexpr uint32_t config = get_compile_time_arg_val(CTA_OFFSET);
    static constexpr bool test(tensor_accessor::ArgConfig f) { return (config & static_cast<uint32_t>(f)) != 0; }
    static constexpr bool is_sharded = test(tensor_accessor::ArgConfig::Sharded);
    static constexpr bool is_dram = test(tensor_accessor::ArgConfig::IsDram);
    static constexpr bool page_size_is_crta = test(tensor_accessor::ArgConfig::RuntimePageSize);
    static_assert(!is_sharded,
                  "TensorAccessorArgs: sharded tensors are not in Kohaku-TT's host build of the kernel API; the "
                  "simulator runs interleaved tensors only");

    static constexpr uint32_t AlignedPageSize = [] {
        if constexpr (page_size_is_crta) {
            return 0u;
        } else {
            return get_compile_time_arg_val(CTA_OFFSET + 1);
        }
    }();
    static constexpr uint32_t NumArgsCT = page_size_is_crta ? 1u : 2u;

    constexpr TensorAccessorArgs() : crta_offset_rt_(0) {}
    constexpr explicit TensorAccessorArgs(uint32_t crta_offset) : crta_offset_rt_(crta_offset) {
        static_assert(CRTA_OFFSET == tensor_accessor::UNKNOWN, "Do not pass crta_offset when CRTA_OFFSET is known");
    }
    constexpr uint32_t crta_offset() const {
        if constexpr (CRTA_OFFSET != tensor_accessor::UNKNOWN) {
            return static_cast<uint32_t>(CRTA_OFFSET);
        } else {
            return crta_offset_rt_;
        }
    }
    uint32_t get_aligned_page_size() const {
        if constexpr (!page_size_is_crta) {
            return AlignedPageSize;
        } else {
            return get_common_arg_val<uint32_t>(crta_offset(), __FILE__, __LINE__);
        }
    }
    static constexpr uint32_t num_compile_time_args() { return NumArgsCT; }
    static constexpr uint32_t next_compile_time_args_offset() { return CTA_OFFSET + num_compile_time_args(); }
    constexpr uint32_t num_common_runtime_args() const { return page_size_is_crta ? 1 : 0; }
    constexpr uint32_t next_common_runtime_args_offset() const { return crta_offset() + num_common_runtime_args(); }

   private:
    uint32_t crta_offset_rt_;
};
