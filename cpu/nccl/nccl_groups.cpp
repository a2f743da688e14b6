// Groups of the CPU build's NCCL (cpu/nccl/nccl.cpp says how it works): calls between ncclGroupStart
// and the outermost ncclGroupEnd are collected, then queued on their stream as one operation that
// posts them all at once and completes them together, each once it has met its partners' calls
// (CUDA_CPU_NCCL_CHECK) and its device lets it run (CUDA_CPU_NCCL_SERIAL, cpu/nccl/nccl_device.h).
#include <cuda_runtime.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cpu/nccl/nccl_device.h"
#include "cpu/nccl/nccl_internal.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/streams.h"

namespace cpu::nccl {
namespace {

struct Collected {
  ncclComm_t comm;
  cudaStream_t stream;
  const char* function;
  Post post;
  cpu::NcclSignature signature;
};

thread_local int group_depth = 0;
thread_local std::vector<Collected> collected;

void change_in_flight(ncclComm_t comm, int change) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->in_flight += change;
  if (comm->in_flight == 0) comm->idle.notify_all();
}

// Marks the group's communicators failed by CUDA_CPU_NCCL_CHECK with `problem`, said on stderr.
void fail_communicators(const std::vector<ncclComm_t>& comms, const std::string& problem) {
  const std::string message = "CUDA_CPU_NCCL_CHECK: " + problem;
  std::fprintf(stderr, "cpu: %s\n", message.c_str());
  for (ncclComm_t comm : comms) {
    if (comm->async_error != ncclSuccess) continue;
    comm->async_message = message;
    comm->async_error = ncclInvalidUsage;
  }
}

// Posts the group's calls, each once it has met its partners' counterparts (CUDA_CPU_NCCL_CHECK,
// cpu/nccl/nccl_call_matching.h) and the calls before it in its channel are posted: a call waits for its own
// partners only, as the calls of an NCCL group do. False when a call differs from its counterpart
// (the communicators have failed) or a communicator was aborted; the calls posted stay pending.
bool post_checked(const std::vector<Collected>& calls, const std::vector<ncclComm_t>& comms, Staging& staging,
                  std::vector<MPI_Request>& requests) {
  std::vector<std::vector<cpu::NcclMeeting>> meetings(calls.size());  // one each, none without the check
  for (ncclComm_t comm : comms) {
    if (!comm->matcher) continue;
    std::vector<cpu::NcclSignature> signatures;
    for (const Collected& c : calls)
      if (c.comm == comm) signatures.push_back(c.signature);
    std::vector<cpu::NcclMeeting> announced = comm->matcher->announce(signatures);
    for (size_t i = 0, k = 0; i < calls.size(); ++i)
      if (calls[i].comm == comm) meetings[i].push_back(std::move(announced[k++]));
  }
  std::vector<bool> posted(calls.size(), false);
  const auto before_in_channel_posted = [&](size_t i) {
    const cpu::NcclMatcher* m = calls[i].comm->matcher.get();
    for (size_t j = 0; j < i; ++j)
      if (!posted[j] && calls[j].comm == calls[i].comm &&
          (!m || m->channel(calls[j].signature) == m->channel(calls[i].signature)))
        return false;
    return true;
  };
  auto sleep = std::chrono::microseconds(1);
  for (size_t left = calls.size(); left > 0;) {
    bool progress = false;
    for (size_t i = 0; i < calls.size(); ++i) {
      if (posted[i]) continue;
      if (!meetings[i].empty()) {
        if (const std::string problem = calls[i].comm->matcher->meet(meetings[i][0]); !problem.empty()) {
          fail_communicators(comms, problem);
          return false;
        }
        if (!meetings[i][0].met()) continue;
      }
      if (!before_in_channel_posted(i)) continue;
      requests.push_back(calls[i].post(staging));
      posted[i] = progress = true;
      --left;
    }
    if (left == 0 || progress) continue;
    bool arrived = false;
    for (ncclComm_t comm : comms)
      if (comm->matcher) arrived |= comm->matcher->receive();
    if (arrived) continue;
    for (ncclComm_t comm : comms)
      if (comm->aborted) return false;
    std::this_thread::sleep_for(sleep);  // as wait_without_spinning, leaving the core to the ranks waited for
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
  return true;
}

// Queues the collected calls on their stream as one operation.
ncclResult_t queue_collected() {
  std::vector<Collected> calls;
  calls.swap(collected);
  if (calls.empty()) return ncclSuccess;
  const cudaStream_t stream = calls.front().stream;
  for (const Collected& c : calls)
    if (c.stream != stream) cpu::unsupported("an NCCL group whose calls use different streams");
  std::vector<ncclComm_t> comms;
  for (const Collected& c : calls)
    if (std::find(comms.begin(), comms.end(), c.comm) == comms.end()) comms.push_back(c.comm);
  for (ncclComm_t comm : comms) change_in_flight(comm, +1);
  const char* name = calls.size() == 1 ? calls.front().function : "ncclGroupEnd";
  cpu::enqueue(stream, name, [calls = std::move(calls), comms] {
    const int device = comms.front()->device;
    const std::vector<const void*> keys(comms.begin(), comms.end());
    const auto aborted = [&comms] {
      return std::any_of(comms.begin(), comms.end(), [](ncclComm_t c) { return c->aborted.load(); });
    };
    if (!cpu::begin_nccl_operation(device, keys, aborted)) {
      cpu::set_sticky_error(cudaErrorLaunchFailure);  // aborted while waiting its turn (CUDA_CPU_NCCL_SERIAL)
      for (ncclComm_t comm : comms) change_in_flight(comm, -1);
      return;
    }
    auto staging = std::make_unique<Staging>();
    std::vector<MPI_Request> requests;
    requests.reserve(calls.size());
    if (post_checked(calls, comms, *staging, requests) && wait_without_spinning(requests, comms)) {
      if (const int latency_us = cpu::settings().nccl_latency_us)
        std::this_thread::sleep_for(std::chrono::microseconds(latency_us));
      staging->finish();
    } else {
      // Aborted: the stream's work fails, as a GPU's kernels would. A mismatch failed the
      // communicators instead (ncclCommGetAsyncError), as NCCL reports its errors.
      if (aborted()) cpu::set_sticky_error(cudaErrorLaunchFailure);
      // The requests stay pending until the process ends (an abort): their buffers must too.
      static std::mutex abandoned_mutex;
      static std::vector<std::unique_ptr<Staging>> abandoned;
      std::lock_guard<std::mutex> lock(abandoned_mutex);
      abandoned.push_back(std::move(staging));
    }
    cpu::end_nccl_operation(device, keys);
    for (ncclComm_t comm : comms) change_in_flight(comm, -1);
  });
  return ncclSuccess;
}

ncclResult_t check_stream(cudaStream_t stream, ncclComm_t comm, const char* function) {
  if (cpu::stream_device(stream) == comm->device) return ncclSuccess;
  return fail(ncclInvalidArgument, std::string(function) + ": the stream is of device " +
                                       std::to_string(cpu::stream_device(stream)) + ", the communicator's device is " +
                                       std::to_string(comm->device));
}
}  // namespace

// Waits for requests without holding a CPU. MPICH's blocking calls (MPI_Wait, MPI_Allreduce)
// poll in a loop, so a rank waiting for a slower peer takes a whole core; with more ranks
// than cores (4 ranks on 2 cores) that starves the very rank it waits for. So: spin for up
// to 50 us, which catches a peer that is already there, then test (MPI_Testall also drives
// MPI's progress) between sleeps that double from 1 us up to 1 ms: a waiting rank costs next
// to no CPU, and a completion is noticed at most about 1 ms late. Gives up (false) once any of
// the communicators is aborted, leaving its requests to the process's end.
bool wait_without_spinning(std::vector<MPI_Request>& requests, const std::vector<ncclComm_t>& comms) {
  constexpr auto spin_time = std::chrono::microseconds(50);
  constexpr auto longest_sleep = std::chrono::microseconds(1000);
  const auto start = std::chrono::steady_clock::now();
  auto sleep = std::chrono::microseconds(1);
  for (;;) {
    int done = 0;
    MPI_Testall(static_cast<int>(requests.size()), requests.data(), &done, MPI_STATUSES_IGNORE);
    if (done) return true;
    for (ncclComm_t comm : comms)
      if (comm->aborted) return false;
    if (std::chrono::steady_clock::now() - start < spin_time) continue;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, longest_sleep);
  }
}

void wait_until_idle(ncclComm_t comm) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  comm->idle.wait(lock, [comm] { return comm->in_flight == 0; });
}

// Outside a group, each call is its own group. `signature` describes the call for
// CUDA_CPU_NCCL_CHECK (its rank and number are filled in here).
ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, const char* function, cpu::NcclSignature signature,
                    Post post) {
  if (const ncclResult_t r = comm->async_error; r != ncclSuccess)
    return fail(r, std::string(function) + ": the communicator failed earlier: " + comm->async_message);
  if (ncclResult_t r = check_stream(stream, comm, function); r != ncclSuccess) return r;
  signature.rank = comm_rank(comm);
  signature.number = ++comm->calls;
  collected.push_back({comm, stream, function, std::move(post), signature});
  return group_depth == 0 ? queue_collected() : ncclSuccess;
}
}  // namespace cpu::nccl

using namespace cpu::nccl;

extern "C" {

ncclResult_t ncclGroupStart() {
  ++group_depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (group_depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group_depth > 0) return ncclSuccess;
  if (ncclResult_t r = check_usable("ncclGroupEnd"); r != ncclSuccess) {
    collected.clear();
    return r;
  }
  return queue_collected();
}

}  // extern "C"
