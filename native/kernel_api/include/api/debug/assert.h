// ASSERT in the host build: a failed assertion ends the kernel with a ProgramError naming the file and line.
#pragma once

#include "ktt_host/host.h"

#define ASSERT(condition, ...)                                                                        \
    do {                                                                                              \
        if (!(condition))                                                                             \
            ::ktt::host::fail("ASSERT", "assertion failed: " #condition,                      \
                                     ::ktt::host::Site{__FILE__, __LINE__});                         \
    } while (0)
