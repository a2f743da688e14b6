// How a block's runner fibers start its threads: the progress they share (owned by the block
// scheduler, cpu/launch/block_scheduler.cpp) and the runner's loop that launch.cuh instantiates per
// kernel. Its own header, so that the scheduler and the launch share it without including each other.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace cpu {

// How far a block's runner fibers have got in starting its threads; owned by the scheduler.
struct ThreadStarts {
  int next = 0;                // position, in the start order, of the next thread to start
  int count = 0;               // threads in the block
  const int* order = nullptr;  // thread ids in start order; null: natural (id = position)
  dim3 block_dim;
  uint64_t suspensions = 0;    // waits so far in the block (a thread left its fiber)
};

// A runner's loop: starts the block's threads one after another until none are left unstarted.
// `call` holds the kernel and its arguments; instantiated per kernel by launch.cuh.
using StartThreads = void (*)(const void* call, ThreadStarts& starts);

// Under `make racecheck`: takes the next thread to start and sets threadIdx to it; false when
// none is left (cpu/launch/block_scheduler.cpp, which ThreadSanitizer does not watch).
bool begin_thread(ThreadStarts& starts);

// The runner's loop, with the thread's body (the kernel call) inlined so that a kernel that
// never waits runs as a plain loop over its threads. A thread that waits leaves this fiber
// holding its frame, and another runner starts the threads after it; so once a wait has
// happened, the loop goes on from wherever the others have got to. Under racecheck a runner
// runs one thread, which is then its own fiber to ThreadSanitizer.
template <typename RunThread>
void start_threads(ThreadStarts& starts, RunThread run_thread) {
#ifdef CPU_RACECHECK
  if (begin_thread(starts)) run_thread();
#else
  const int* const order = starts.order;
  const dim3 dim = starts.block_dim;
  const int count = starts.count;
  uint64_t suspensions = starts.suspensions;
  if (!order && dim.y == 1 && dim.z == 1) {  // the common case: one store of the index per thread
    threadIdx.y = threadIdx.z = 0;  // and so they stay: whoever resumes a thread of the block sets them so
    for (int id = starts.next; id < count;) {
      starts.next = id + 1;
      threadIdx.x = unsigned(id);
      run_thread();
      if (starts.suspensions == suspensions) {
        ++id;
      } else {
        suspensions = starts.suspensions;
        id = starts.next;
      }
    }
    return;
  }
  for (int position = starts.next; position < count;) {
    starts.next = position + 1;
    const int id = order ? order[position] : position;
    threadIdx.x = id % dim.x;
    threadIdx.y = (id / dim.x) % dim.y;
    threadIdx.z = id / (dim.x * dim.y);
    run_thread();
    if (starts.suspensions == suspensions) {
      ++position;
    } else {
      suspensions = starts.suspensions;
      position = starts.next;
    }
  }
#endif
}

}  // namespace cpu
