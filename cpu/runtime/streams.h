// Streams of the CPU build, asynchronous as on a GPU: each stream is a queue of operations that
// its own worker thread runs in order, concurrently with the host and with other streams.
// The legacy default stream (nullptr) of each device keeps CUDA's implicit synchronisation: its
// operations wait for all earlier work of the device's blocking streams, and theirs for its.
// Events, stream waits and host synchronisation are in cpu/runtime/streams.cpp with the CUDA API they serve.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

// current_device, use_current_context: cpu/runtime/devices.h; current_operation and the other
// questions a thread asks of itself: cpu/runtime/thread_state.h.
#include "cpu/runtime/devices.h"
#include "cpu/runtime/thread_state.h"

namespace cpu {

// The device whose work `stream` queues (nullptr: the current device's default stream).
int stream_device(cudaStream_t stream);

struct StreamQueue;
// A queued operation: done once its queue has completed `number` operations.
struct Ticket {
  std::shared_ptr<StreamQueue> queue;
  uint64_t number = 0;
};

// Queues `work` on `stream` (ordered as described above, and after `after` when given). `name`
// says what the operation is in reports: a kernel's name, "cudaMemcpyAsync", "ncclAllReduce".
// Work runs on the stream's worker thread; nothing runs once a kernel has failed (sticky error).
// Queuing uses the calling thread's context, as current_device() does.
Ticket enqueue(cudaStream_t stream, std::string name, std::function<void()> work, const Ticket& after = {});

// The host waits: for one operation, for all work queued on a stream so far, for a device's.
void wait_for(const Ticket& ticket);
void synchronize_stream(cudaStream_t stream);
void synchronize_device(int device);

// Marks the calling thread, while it lives, as running operation `name` of `device` (a kernel's
// blocks: `kernel`, named when reported): reports name it, and in strict mode the thread may touch
// that device's memory. Stream workers and the threads that help them run a kernel hold one.
class RunningOperation {
 public:
  RunningOperation(const char* name, int device, const void* kernel = nullptr);
  ~RunningOperation();
  RunningOperation(const RunningOperation&) = delete;
  RunningOperation& operator=(const RunningOperation&) = delete;

 private:
  OperationOnThread saved_;
};

}  // namespace cpu
