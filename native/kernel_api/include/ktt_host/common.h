// What every kernel sees in the host build, data movement and compute alike: arguments, CB indices, the core's
// coordinates, circular buffers (the data-movement forms), debug printing.
#pragma once

#include <cstdint>
#include <cstring>

#include "api/compile_time_args.h"
#include "hostdevcommon/kernel_structs.h"
#include "ktt_host/host.h"

#ifndef NOC_INDEX
#define NOC_INDEX 0
#endif
inline constexpr uint8_t noc_index = NOC_INDEX;

// Runtime arguments live in the core's L1, as on the card: get_arg_addr gives their address.
static FORCE_INLINE uint32_t get_arg_addr(int arg_idx, KTT_SITE) {
    return ::ktt::host::arg_addr(arg_idx, false, KTT_HERE);
}
static FORCE_INLINE uint32_t get_common_arg_addr(int arg_idx, KTT_SITE) {
    return ::ktt::host::arg_addr(arg_idx, true, KTT_HERE);
}

template <typename T>
FORCE_INLINE T get_arg_val(int arg_idx, KTT_SITE) {
    static_assert(sizeof(T) == 4, "Error: only 4B args are supported");
    T v;
    std::memcpy(&v, reinterpret_cast<const void *>(static_cast<uintptr_t>(get_arg_addr(arg_idx, ktt_file_, ktt_line_))), 4);
    return v;
}

template <typename T>
FORCE_INLINE T get_common_arg_val(int arg_idx, KTT_SITE) {
    static_assert(sizeof(T) == 4, "Error: only 4B args are supported");
    T v;
    std::memcpy(&v,
                reinterpret_cast<const void *>(static_cast<uintptr_t>(get_common_arg_addr(arg_idx, ktt_file_, ktt_line_))),
                4);
    return v;
}

// The core's coordinates: my_x[noc] / my_y[noc] (the simulator's NOC coordinates are the logical ones).
struct ktt_my_coord {
    int axis;
    uint8_t operator[](int) const { return ::ktt::host::my_coord(axis); }
};
inline constexpr ktt_my_coord my_x{0}, my_y{1};
inline uint8_t get_absolute_logical_x() { return ::ktt::host::my_coord(0); }
inline uint8_t get_absolute_logical_y() { return ::ktt::host::my_coord(1); }
inline uint8_t get_relative_logical_x() { return ::ktt::host::my_coord(0); }
inline uint8_t get_relative_logical_y() { return ::ktt::host::my_coord(1); }

#include "api/debug/dprint.h"
