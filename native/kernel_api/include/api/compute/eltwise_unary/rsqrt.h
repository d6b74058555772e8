// api/compute/eltwise_unary/rsqrt.h of TT-Metal 0.81.1, host build: the whole host compute API (ktt_host/compute.h).
#pragma once

#include "ktt_host/compute.h"
