#include "api/dataflow/dataflow_api.h"

void kernel_main() {}
