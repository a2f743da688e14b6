// CPU build: NVIDIA's <cuda_runtime.h> for the types and declarations, then the
// device side (threadIdx, __syncthreads, shuffles, atomics, ...) that cpu/ supplies.
#pragma once
#include_next <cuda_runtime.h>
#include "../launch/device_builtins.h"
