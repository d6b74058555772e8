#include "dataflow_api.h"
void kernel_main() {}
