// Streams, events and host synchronisation of the CPU build (cpu/runtime/streams.h). One mutex guards
// every queue and one condition variable announces every change: a process has a few streams and
// operations are kernels or copies, so simplicity beats finer locking. The state is never freed:
// worker threads may still wait on it while the process exits.
#include "cpu/runtime/streams.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "cpu/runtime/call_counts.h"
#include "cpu/runtime/devices.h"
#include "cpu/runtime/memory.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/thread_state.h"

namespace cpu {

struct Operation {
  uint64_t number;
  std::string name;
  std::function<void()> work;
  std::vector<Ticket> after;  // operations of other queues it waits for
};

struct StreamQueue {
  int device;
  bool blocking;  // synchronises with the legacy default stream (not cudaStreamNonBlocking)
  bool legacy;    // the device's default stream
  std::deque<Operation> pending;
  uint64_t queued = 0;     // operations ever queued
  uint64_t completed = 0;  // operations run (or skipped after a failure), in order
  bool destroyed = false;  // the worker leaves once pending is empty
};

}  // namespace cpu

struct CUstream_st {
  std::shared_ptr<cpu::StreamQueue> queue;
};

struct CUevent_st {
  unsigned flags;
  cpu::Ticket recorded;                                         // the last cudaEventRecord
  std::shared_ptr<std::chrono::steady_clock::time_point> when;  // set when it ran
};

namespace cpu {
namespace {

struct State {
  std::mutex mutex;
  std::condition_variable changed;
  std::vector<std::shared_ptr<StreamQueue>> queues;  // live queues, every device
  std::vector<std::shared_ptr<StreamQueue>> legacy;  // per device, made on first use
  std::map<int, uint64_t> in_flight;  // per device: operations queued or running (strict memory by pages)
};
State& state() {
  static State& s = *new State;
  return s;
}


bool is_done(const Ticket& t) { return !t.queue || t.queue->completed >= t.number; }

void run_worker(std::shared_ptr<StreamQueue> queue) {
  State& s = state();
  std::unique_lock<std::mutex> lock(s.mutex);
  for (;;) {
    s.changed.wait(lock, [&] { return !queue->pending.empty() || queue->destroyed; });
    if (queue->pending.empty()) break;
    Operation op = std::move(queue->pending.front());
    queue->pending.pop_front();
    s.changed.wait(lock, [&] {
      for (const Ticket& t : op.after)
        if (!is_done(t)) return false;
      return true;
    });
    lock.unlock();
    if (const int delay_us = settings().stream_delay_us)
      std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
    if (sticky_error() == cudaSuccess) {
      RunningOperation running_op(op.name.c_str(), queue->device);
      op.work();
    }
    op = Operation{};  // what the work captured goes before the operation counts as done
    lock.lock();
    queue->completed += 1;
    if (--s.in_flight[queue->device] == 0) set_device_memory_open(queue->device, false);
    s.changed.notify_all();
  }
  std::erase(s.queues, queue);
}

std::shared_ptr<StreamQueue> make_queue(int device, bool blocking, bool legacy) {
  auto queue = std::make_shared<StreamQueue>();
  queue->device = device;
  queue->blocking = blocking;
  queue->legacy = legacy;
  state().queues.push_back(queue);
  std::thread(run_worker, queue).detach();
  return queue;
}

// The queue of a stream handle; the caller holds the state's mutex.
std::shared_ptr<StreamQueue> queue_of(cudaStream_t stream) {
  if (stream == cudaStreamPerThread) unsupported("cudaStreamPerThread");
  if (stream != nullptr && stream != cudaStreamLegacy) return stream->queue;
  State& s = state();
  const int device = selected_device();
  if (s.legacy.size() <= size_t(device)) s.legacy.resize(device + 1);
  if (!s.legacy[device]) s.legacy[device] = make_queue(device, true, true);
  return s.legacy[device];
}

Ticket last_of(const std::shared_ptr<StreamQueue>& queue) { return {queue, queue->queued}; }

Ticket enqueue_locked(const std::shared_ptr<StreamQueue>& queue, std::string name, std::function<void()> work,
                      const Ticket& after) {
  State& s = state();
  Operation op{++queue->queued, std::move(name), std::move(work), {}};
  if (after.queue) op.after.push_back(after);
  // CUDA's implicit synchronisation between the legacy default stream and blocking streams.
  if (queue->blocking)
    for (const auto& other : s.queues)
      if (other != queue && other->device == queue->device && other->blocking && (queue->legacy || other->legacy) &&
          other->completed < other->queued)
        op.after.push_back(last_of(other));
  const Ticket ticket{queue, op.number};
  queue->pending.push_back(std::move(op));
  if (s.in_flight[queue->device]++ == 0) set_device_memory_open(queue->device, true);
  s.changed.notify_all();
  return ticket;
}

void wait_locked(std::unique_lock<std::mutex>& lock, const Ticket& ticket) {
  state().changed.wait(lock, [&] { return is_done(ticket); });
}

cudaError_t sticky_or_success() { return sticky_error() != cudaSuccess ? set_error(sticky_error()) : cudaSuccess; }

}  // namespace

int stream_device(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return selected_device();
  return stream->queue->device;
}

Ticket enqueue(cudaStream_t stream, std::string name, std::function<void()> work, const Ticket& after) {
  use_current_context(name.c_str());
  std::lock_guard<std::mutex> lock(state().mutex);
  return enqueue_locked(queue_of(stream), std::move(name), std::move(work), after);
}

void wait_for(const Ticket& ticket) {
  std::unique_lock<std::mutex> lock(state().mutex);
  wait_locked(lock, ticket);
}

void synchronize_stream(cudaStream_t stream) {
  use_current_context("cudaStreamSynchronize");
  std::unique_lock<std::mutex> lock(state().mutex);
  const std::shared_ptr<StreamQueue> queue = queue_of(stream);
  // The legacy stream's synchronisation is an operation on it: it waits for the blocking streams too.
  const Ticket ticket = queue->legacy ? enqueue_locked(queue, "cudaStreamSynchronize", [] {}, {}) : last_of(queue);
  wait_locked(lock, ticket);
}

void synchronize_device(int device) {
  std::unique_lock<std::mutex> lock(state().mutex);
  std::vector<Ticket> tickets;
  for (const auto& queue : state().queues)
    if (queue->device == device) tickets.push_back(last_of(queue));
  for (const Ticket& ticket : tickets) wait_locked(lock, ticket);
}

RunningOperation::RunningOperation(const char* name, int device, const void* kernel)
    : saved_(set_operation_on_thread({name, device, kernel})) {
  allow_device_access(device);
}
RunningOperation::~RunningOperation() {
  set_operation_on_thread(saved_);
  allow_device_access(saved_.device);
}

}  // namespace cpu

using cpu::set_error;

// Not uses of a device (cpu/runtime/devices.h): selecting one, asking which is selected, counting them.
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= cpu::visible_device_count()) return set_error(cudaErrorInvalidDevice);
  cpu::set_current_device(device);
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  if (!device) return set_error(cudaErrorInvalidValue);
  *device = cpu::selected_device();
  return cudaSuccess;
}
// The devices CUDA_VISIBLE_DEVICES leaves visible; none is cudaErrorNoDevice, as in CUDA.
cudaError_t cudaGetDeviceCount(int* count) {
  if (!count) return set_error(cudaErrorInvalidValue);
  *count = cpu::visible_device_count();
  return *count == 0 ? set_error(cudaErrorNoDevice) : cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (!stream || (flags & ~cudaStreamNonBlocking)) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cpu::state().mutex);
  *stream = new CUstream_st{cpu::make_queue(cpu::current_device(), !(flags & cudaStreamNonBlocking), false)};
  return cudaSuccess;
}
cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

// As CUDA documents: work still queued completes, then the stream's resources go.
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy) return set_error(cudaErrorInvalidResourceHandle);
  {
    std::lock_guard<std::mutex> lock(cpu::state().mutex);
    stream->queue->destroyed = true;
    cpu::state().changed.notify_all();
  }
  delete stream;
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cpu::count_host_wait();
  cpu::synchronize_stream(stream);
  return cpu::sticky_or_success();
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cpu::use_current_context("cudaStreamQuery");
  std::lock_guard<std::mutex> lock(cpu::state().mutex);
  const auto queue = cpu::queue_of(stream);
  if (queue->completed < queue->queued) return cudaErrorNotReady;
  return cpu::sticky_or_success();
}

cudaError_t cudaDeviceSynchronize() {
  cpu::count_host_wait();
  cpu::synchronize_device(cpu::current_device());
  return cpu::sticky_or_success();
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (!event) return set_error(cudaErrorInvalidValue);
  cpu::use_current_context("cudaEventCreate");
  *event = new CUevent_st{flags, {}, nullptr};
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

// The event captures the stream's work queued so far; its time is taken when the stream reaches it.
cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  auto when = std::make_shared<std::chrono::steady_clock::time_point>();
  event->recorded = cpu::enqueue(stream, "cudaEventRecord", [when] { *when = std::chrono::steady_clock::now(); });
  event->when = when;
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t function, void* data) {
  if (!function) return set_error(cudaErrorInvalidValue);
  cpu::enqueue(stream, "cudaLaunchHostFunc", [function, data] { function(data); });
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  if (event->recorded.queue) cpu::enqueue(stream, "cudaStreamWaitEvent", [] {}, event->recorded);
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  cpu::use_current_context("cudaEventSynchronize");
  cpu::count_host_wait();
  cpu::wait_for(event->recorded);
  return cpu::sticky_or_success();
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (!event) return set_error(cudaErrorInvalidResourceHandle);
  cpu::use_current_context("cudaEventQuery");
  std::lock_guard<std::mutex> lock(cpu::state().mutex);
  return cpu::is_done(event->recorded) ? cpu::sticky_or_success() : cudaErrorNotReady;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!ms || !start || !end || !start->recorded.queue || !end->recorded.queue ||
      ((start->flags | end->flags) & cudaEventDisableTiming))
    return set_error(cudaErrorInvalidResourceHandle);
  cpu::use_current_context("cudaEventElapsedTime");
  std::lock_guard<std::mutex> lock(cpu::state().mutex);
  if (!cpu::is_done(start->recorded) || !cpu::is_done(end->recorded)) return set_error(cudaErrorNotReady);
  *ms = std::chrono::duration<float, std::milli>(*end->when - *start->when).count();
  return cudaSuccess;
}
