// Streams of the CPU build, asynchronous as on a GPU: each stream is a queue of operations that
// its own worker thread runs in order, concurrently with the host and with other streams.
// The legacy default stream (nullptr) of each device keeps CUDA's implicit synchronisation: its
// operations wait for all earlier work of the device's blocking streams, and theirs for its.
// Events, stream waits and host synchronisation are in cpu/streams.cpp with the CUDA API they serve.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace cpu {

// The calling host thread's current device (cudaSetDevice; 0 until set), for a call that uses its
// context: the use is recorded for the process (cpu/devices.h: one process, one device).
int current_device();
// The calling thread's call `what` uses its current device's context, as current_device() says.
void use_current_context(const char* what);
void set_current_device(int device);

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
  const char* saved_name_;
  int saved_device_;
  const void* saved_kernel_;
};
// What the calling thread runs (nullptr on a host thread), for which device, which kernel if any.
const char* current_operation();
int current_operation_device();
const void* current_kernel();

}  // namespace cpu
