#include <cstdint>

#include "api/compute/topk.h"

void kernel_main() {}
