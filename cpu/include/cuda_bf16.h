// CPU build: NVIDIA's <cuda_bf16.h> (host conversions and operators work under g++),
// then the device side that cpu/ supplies.
#pragma once
#include_next <cuda_bf16.h>
#include "../launch/device_builtins.h"
