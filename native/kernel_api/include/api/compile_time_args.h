// Compile-time arguments as TT-Metal's JIT passes them: -DKERNEL_COMPILE_TIME_ARGS=a,b,c and, for named ones,
// -DKERNEL_COMPILE_TIME_ARG_MAP={"name",value},... (host build of the 0.81.1 header of the same name).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

template <class T, class... Ts>
constexpr std::array<T, sizeof...(Ts)> make_array(Ts... values) {
    return {T(values)...};
}

#ifndef KERNEL_COMPILE_TIME_ARGS
#define KERNEL_COMPILE_TIME_ARGS
#endif

constexpr auto kernel_compile_time_args = make_array<std::uint32_t>(KERNEL_COMPILE_TIME_ARGS);

template <uint32_t Idx>
constexpr uint32_t get_ct_arg() {
    static_assert(Idx < kernel_compile_time_args.size(),
                  "get_compile_time_arg_val: index out of range of the kernel's compile-time args");
    return kernel_compile_time_args[Idx];
}

#define get_compile_time_arg_val(arg_idx) get_ct_arg<arg_idx>()

#ifdef KERNEL_COMPILE_TIME_ARG_MAP
namespace ktt_named_ct {
constexpr std::pair<std::string_view, uint32_t> named_args_map[] = {KERNEL_COMPILE_TIME_ARG_MAP};
}
constexpr uint32_t get_named_ct_arg(std::string_view name) {
    for (const auto &[arg_name, value] : ktt_named_ct::named_args_map) {
        if (name == arg_name) return value;
    }
    throw "get_named_compile_time_arg_val: the kernel has no named compile-time arg of that name";
}
constexpr uint32_t get_named_compile_time_arg_val(std::string_view name) { return get_named_ct_arg(name); }
#endif
