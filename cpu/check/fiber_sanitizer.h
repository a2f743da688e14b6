// Tells AddressSanitizer about the block scheduler's switches between stacks (`make
// sanitize`, docs/testing.md); without it every function is a no-op. ASan keeps one stack
// per OS thread in mind: a fiber's frames would look like a wild stack, and unwinding or
// a noreturn call on a fiber stack would unpoison the wrong memory. The protocol is
// sanitizer/common_interface_defs.h's: __sanitizer_start_switch_fiber before each jump,
// naming the stack jumped to, __sanitizer_finish_switch_fiber first thing after it.
#pragma once
#include <cstddef>

#include "cpu/check/sanitizer.h"

namespace cpu {

// What ASan needs of one context: its fake stack (frames of detect_stack_use_after_return)
// while it is suspended, and for the scheduler its stack, which is the OS thread's.
struct FiberSanitizerState {
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;
  size_t stack_bytes = 0;
};

// Before a jump to a suspended context on [bottom, bottom + bytes). The context leaving saves
// its fake stack in *leaving; nullptr when it never resumes (ASan then frees its fake stack).
inline void sanitizer_start_switch(FiberSanitizerState* leaving, const void* bottom, size_t bytes) {
#ifdef CPU_UNDER_ASAN
  __sanitizer_start_switch_fiber(leaving ? &leaving->fake_stack : nullptr, bottom, bytes);
#endif
}

// Before a jump to a fiber not started yet on [bottom, bottom + bytes): the stack is reused, and
// a fiber abandoned on it (a deadlocked or failed block) left its frames' redzones poisoned.
inline void sanitizer_start_new_fiber(FiberSanitizerState* leaving, void* bottom, size_t bytes) {
#ifdef CPU_UNDER_ASAN
  __asan_unpoison_memory_region(bottom, bytes);
  __sanitizer_start_switch_fiber(leaving ? &leaving->fake_stack : nullptr, bottom, bytes);
#endif
}

// Before BlockRunner::run's jump into a block's first fiber, which records the scheduler's stack
// anew (sanitizer_finish_first_switch).
inline void sanitizer_start_block(FiberSanitizerState& scheduler, void* bottom, size_t bytes) {
  scheduler.stack_bottom = nullptr;
  sanitizer_start_new_fiber(&scheduler, bottom, bytes);
}

// First thing after a jump returns to a suspended context: restores its fake stack.
inline void sanitizer_finish_switch(FiberSanitizerState* resumed) {
#ifdef CPU_UNDER_ASAN
  __sanitizer_finish_switch_fiber(resumed ? resumed->fake_stack : nullptr, nullptr, nullptr);
#endif
}

// First thing in a new fiber. A block's first fiber is entered from the scheduler, whose stack
// (the calling OS thread's) it records for the jumps back.
inline void sanitizer_finish_first_switch(FiberSanitizerState& scheduler) {
#ifdef CPU_UNDER_ASAN
  const void* from_bottom = nullptr;
  size_t from_bytes = 0;
  __sanitizer_finish_switch_fiber(nullptr, &from_bottom, &from_bytes);
  if (scheduler.stack_bottom == nullptr) {
    scheduler.stack_bottom = from_bottom;
    scheduler.stack_bytes = from_bytes;
  }
#endif
}

// Before a fiber stack is unmapped. Its frames' redzones stay poisoned in ASan's shadow after
// munmap, and a later mapping at the same addresses (another thread's stack, whose top holds
// its thread_local variables) would be reported as a stack overflow: seen once in CI, in
// the thread_local destructors of an exiting stream worker.
inline void sanitizer_release_stack(void* bottom, size_t bytes) {
#ifdef CPU_UNDER_ASAN
  __asan_unpoison_memory_region(bottom, bytes);
#endif
}

}  // namespace cpu
