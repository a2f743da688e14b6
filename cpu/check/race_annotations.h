// Tells ThreadSanitizer (`make racecheck`, docs/testing.md) what the block scheduler does, so
// that it finds the races a GPU's racecheck would: every CUDA thread is its own TSan fiber, and
// the only orders between them are the ones CUDA promises. Without CPU_RACECHECK (every other
// build) each function is a no-op.
//
// The scheduler's switches between CUDA threads carry no order (no_sync); each thread starts
// after what its block's scheduler saw (the stream's work before the launch: it acquires the
// block's `start`), and a barrier or warp collective orders exactly the threads that meet at it.
// At __syncthreads every thread releases the barrier's object as it arrives and acquires it as it
// goes on; at a warp collective each lane releases its own `arrive` object, the lane that
// completes the collective acquires those of the mask's lanes and releases each waiter's `wake`
// object, and each waiter acquires its `wake` when it resumes. Every thread releases the launch's
// end object as it finishes, which the stream acquires once the grid is done (cpu/launch/launch_kernel.cpp).
// Fibers and their stacks are kept from launch to launch (cpu/launch/race_fibers.cpp). The scheduler's
// own code (cpu/launch/block_scheduler.cpp, cpu/launch/warp_collectives.cpp, cpu/launch/race_fibers.cpp) is compiled
// without instrumentation: its bookkeeping is shared by all fibers of a block on purpose.
// ThreadSanitizer still sees what it allocates, frees and maps, as done by whichever fiber runs
// it: so the scheduler allocates and maps only in its own context (BlockRunner::run), never in a
// CUDA thread's, and a failing fiber writes its report with TSan looking away.
#pragma once
#include <cuda_runtime.h>

#ifdef CPU_RACECHECK
#include <sanitizer/tsan_interface.h>
extern "C" void __tsan_ignore_thread_begin();  // exported by the runtime, not declared in its header
extern "C" void __tsan_ignore_thread_end();
#endif

namespace cpu {

#ifdef CPU_RACECHECK
inline constexpr bool racecheck = true;
#else
inline constexpr bool racecheck = false;
#endif

// Just before a jump to the context of `fiber`.
inline void race_switch_to(void* fiber) {
#ifdef CPU_RACECHECK
  __tsan_switch_to_fiber(fiber, __tsan_switch_to_fiber_no_sync);
#endif
}

inline void race_release(const void* sync) {
#ifdef CPU_RACECHECK
  __tsan_release(const_cast<void*>(sync));
#endif
}

inline void race_acquire(const void* sync) {
#ifdef CPU_RACECHECK
  __tsan_acquire(const_cast<void*>(sync));
#endif
}

// Between the two, the calling fiber's accesses, allocations included, are not watched: for the
// scheduler's bookkeeping that a failing fiber writes and the scheduler's context reads.
inline void race_ignore_begin() {
#ifdef CPU_RACECHECK
  __tsan_ignore_thread_begin();
#endif
}
inline void race_ignore_end() {
#ifdef CPU_RACECHECK
  __tsan_ignore_thread_end();
#endif
}

inline void* race_current_fiber() {
#ifdef CPU_RACECHECK
  return __tsan_get_current_fiber();
#else
  return nullptr;
#endif
}

inline void* race_create_fiber() {
#ifdef CPU_RACECHECK
  return __tsan_create_fiber(0);
#else
  return nullptr;
#endif
}

// Names the fiber in reports by the CUDA thread it runs now: "CUDA thread (x,y,z) of block
// (x,y,z)". Written by hand: snprintf took 4% of a racecheck run, every thread of every block.
inline void race_name_fiber(void* fiber, dim3 block, dim3 thread) {
#ifdef CPU_RACECHECK
  char name[96], *p = name;
  const auto put = [&p](const char* text) {
    while (*text) *p++ = *text++;
  };
  const auto number = [&p](unsigned n) {
    char digits[10];
    int k = 0;
    do digits[k++] = char('0' + n % 10); while (n /= 10);
    while (k) *p++ = digits[--k];
  };
  const auto triple = [&](dim3 d) {
    put("(");
    number(d.x);
    put(",");
    number(d.y);
    put(",");
    number(d.z);
    put(")");
  };
  put("CUDA thread ");
  triple(thread);
  put(" of block ");
  triple(block);
  *p = 0;
  __tsan_set_fiber_name(fiber, name);
#endif
}

inline void race_destroy_fiber(void* fiber) {
#ifdef CPU_RACECHECK
  __tsan_destroy_fiber(fiber);
#endif
}

}  // namespace cpu
