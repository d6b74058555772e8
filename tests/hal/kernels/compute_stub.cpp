#include "api/compute/common.h"

void kernel_main() {}
