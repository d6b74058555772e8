// DPRINT in the host build: the stream operators accept what the card's DPRINT does and print nothing (the
// simulator has no device print server); DPRINT_* per-RISC variants likewise.
#pragma once

#include <cstdint>

namespace ktt {
struct NullPrint {
    template <typename T>
    constexpr const NullPrint &operator<<(const T &) const {
        return *this;
    }
};
}  // namespace ktt

#define DPRINT (::ktt::NullPrint{})
#define DPRINT_UNPACK(x)
#define DPRINT_MATH(x)
#define DPRINT_PACK(x)
#define DPRINT_DATA0(x)
#define DPRINT_DATA1(x)
#define ENDL() '\n'
#define SETW(x) (x)
#define SETPRECISION(x) (x)
#define FIXED() 0
#define HEX() 0
#define DEC() 0
#define TSLICE(...) 0
