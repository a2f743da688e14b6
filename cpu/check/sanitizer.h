// Whether this translation unit is compiled with AddressSanitizer (`make sanitize`), for the
// few places in cpu/ that tell it what it cannot see: fiber switches (cpu/check/fiber_sanitizer.h)
// and the rounding of device allocations (cpu/runtime/memory.cpp). gcc says __SANITIZE_ADDRESS__,
// clang __has_feature(address_sanitizer).
#pragma once

#if defined(__SANITIZE_ADDRESS__)
#define CPU_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CPU_UNDER_ASAN 1
#endif
#endif

#ifdef CPU_UNDER_ASAN
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
