// NCCL on the CPU, over MPI. A communicator is an MPI communicator on one device (the current one
// when it was made); every send, receive and collective is a nonblocking MPI call. Calls between
// ncclGroupStart and the outermost ncclGroupEnd are only collected, then queued on their stream as
// one operation that posts them all at once and completes them together, so a group that cannot
// deadlock in NCCL cannot deadlock here. As in NCCL, a call returns once its work is queued: it
// runs on the stream's worker thread, so MPI must be initialised with MPI_THREAD_MULTIPLE. Buffers
// must be memory of the communicator's device, and two ranks of one node may not share a device
// (NCCL's "Duplicate GPU detected"). MPI errors abort (MPI_ERRORS_ARE_FATAL).
// MPI itself sees only host copies of the buffers (Staging below): its progress engine runs in
// whichever thread calls MPI next, and with CUDA_CPU_STRICT_MEMORY only the stream's worker may
// touch device memory.
#include <cuda_bf16.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>

#include "cpu/call_counts.h"
#include "cpu/memory.h"
#include "cpu/nccl_call_matching.h"
#include "cpu/nccl_device.h"
#include "cpu/runtime_state.h"
#include "cpu/settings.h"
#include "cpu/streams.h"

struct ncclComm {
  // Every rank of mpi makes it at once (ncclCommInitRank, ncclCommSplit): with the check on, it
  // duplicates the communicator for the check's own messages.
  ncclComm(MPI_Comm mpi, int device) : mpi(mpi), device(device) {
    if (!cpu::settings().nccl_check) return;
    MPI_Comm_dup(mpi, &check_mpi);
    matcher = std::make_unique<cpu::NcclMatcher>(check_mpi);
  }
  MPI_Comm mpi;
  MPI_Comm check_mpi = MPI_COMM_NULL;
  std::unique_ptr<cpu::NcclMatcher> matcher;  // CUDA_CPU_NCCL_CHECK (cpu/nccl_call_matching.h), if on when made
  int device;
  int64_t calls = 0;  // calls made on it (the host's count: CUDA_CPU_NCCL_CHECK names calls by it)
  std::atomic<bool> aborted{false};  // ncclCommAbort: queued work gives up waiting
  // An operation that failed on its stream (CUDA_CPU_NCCL_CHECK): ncclCommGetAsyncError's result,
  // and the message every later call on the communicator fails with.
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  std::string async_message;  // written once, before async_error
  std::mutex mutex;
  std::condition_variable idle;
  int in_flight = 0;  // queued operations not yet completed
};

namespace {

thread_local std::string last_error;  // what ncclGetLastError returns

ncclResult_t fail(ncclResult_t result, const std::string& message) {
  last_error = message;
  return result;
}

ncclResult_t check_usable(const char* function) {
  if (cpu::sticky_error() != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(function) + ": a kernel failed earlier");
  int initialized = 0, level = 0;
  MPI_Initialized(&initialized);
  if (!initialized)
    return fail(ncclInvalidUsage, std::string(function) + ": the CPU build's NCCL runs over MPI; call MPI_Init first");
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return fail(ncclInvalidUsage, std::string(function) +
                                      ": the CPU build's NCCL calls MPI from stream threads; initialise MPI with "
                                      "MPI_Init_thread(..., MPI_THREAD_MULTIPLE, ...)");
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm_t comm, const char* function) {
  if (ncclResult_t r = check_usable(function); r != ncclSuccess) return r;
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(function) + ": comm is null");
  return ncclSuccess;
}

int comm_size(ncclComm_t comm) {
  int size = 0;
  MPI_Comm_size(comm->mpi, &size);
  return size;
}
int comm_rank(ncclComm_t comm) {
  int rank = 0;
  MPI_Comm_rank(comm->mpi, &rank);
  return rank;
}

ncclResult_t check_rank(int rank, ncclComm_t comm, const char* function, const char* argument) {
  if (rank >= 0 && rank < comm_size(comm)) return ncclSuccess;
  return fail(ncclInvalidArgument, std::string(function) + ": " + argument + " " + std::to_string(rank) +
                                       " is not a rank of a communicator of " + std::to_string(comm_size(comm)));
}

// NCCL works on device memory of the communicator's device, with a stream of that device.
ncclResult_t check_buffer(const void* buffer, size_t bytes, ncclComm_t comm, const char* function, const char* name) {
  cpu::Allocation a;
  if (bytes == 0 || (cpu::find_allocation(buffer, bytes, a) && a.device == comm->device)) return ncclSuccess;
  return fail(ncclInvalidArgument, std::string(function) + ": " + name + " is not device memory of the communicator's device " +
                                       std::to_string(comm->device) + " (" + std::to_string(bytes) + " bytes)");
}
ncclResult_t check_stream(cudaStream_t stream, ncclComm_t comm, const char* function) {
  if (cpu::stream_device(stream) == comm->device) return ncclSuccess;
  return fail(ncclInvalidArgument, std::string(function) + ": the stream is of device " +
                                       std::to_string(cpu::stream_device(stream)) + ", the communicator's device is " +
                                       std::to_string(comm->device));
}

// MPI counts are ints; the CPU build never moves 2^31 elements in one call.
int mpi_count(size_t count, const char* function) {
  if (count > INT_MAX) cpu::unsupported((std::string(function) + " with a count above INT_MAX").c_str());
  return static_cast<int>(count);
}

// ---- data types and reductions ----

struct Element {
  MPI_Datatype mpi;
  size_t bytes;
};

Element element(ncclDataType_t type, const char* function) {
  switch (type) {
    case ncclFloat32: return {MPI_FLOAT, 4};
    case ncclFloat64: return {MPI_DOUBLE, 8};
    case ncclBfloat16: return {MPI_UINT16_T, 2};  // reduced only by the bf16 operations below
    case ncclInt32: return {MPI_INT32_T, 4};
    case ncclUint8: return {MPI_UINT8_T, 1};
    default: break;
  }
  cpu::unsupported((std::string(function) + " with datatype " + std::to_string(type) +
                    " (supported: ncclFloat32, ncclFloat64, ncclBfloat16, ncclInt32, ncclUint8)")
                       .c_str());
}

// bf16 reductions work in fp32 and round each partial result to bf16, as NCCL does;
// the order of the partial results is MPI's.
void bf16_sum(void* in, void* inout, int* length, MPI_Datatype*) {
  const __nv_bfloat16* a = static_cast<const __nv_bfloat16*>(in);
  __nv_bfloat16* b = static_cast<__nv_bfloat16*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = __float2bfloat16(__bfloat162float(a[i]) + __bfloat162float(b[i]));
}
void bf16_max(void* in, void* inout, int* length, MPI_Datatype*) {
  const __nv_bfloat16* a = static_cast<const __nv_bfloat16*>(in);
  __nv_bfloat16* b = static_cast<__nv_bfloat16*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = __float2bfloat16(std::max(__bfloat162float(a[i]), __bfloat162float(b[i])));
}

MPI_Op reduction(ncclRedOp_t op, ncclDataType_t type, const char* function) {
  if (type == ncclBfloat16 && (op == ncclSum || op == ncclMax)) {
    // Created on first use: MPI_Op_create needs MPI_Init, which the program calls.
    static MPI_Op sum = MPI_OP_NULL, max = MPI_OP_NULL;
    if (sum == MPI_OP_NULL) {
      MPI_Op_create(bf16_sum, /*commute=*/1, &sum);
      MPI_Op_create(bf16_max, /*commute=*/1, &max);
    }
    return op == ncclSum ? sum : max;
  }
  if (op == ncclSum) return MPI_SUM;
  if (op == ncclMax) return MPI_MAX;
  cpu::unsupported((std::string(function) + " with op " + std::to_string(op) + " (supported: ncclSum, ncclMax)").c_str());
}

// ---- groups ----

// The host copies of one group's device buffers, made on the stream's worker (which may touch
// them). MPI's progress runs in whichever thread calls MPI next (another library's listener,
// say), and in strict memory mode no thread but the worker may touch device memory, as a GPU's
// host threads may not: so MPI gets host buffers. in() copies a buffer MPI reads; out() gives
// one MPI writes, copied back by finish() once the group completes (initial: copied in first,
// for in-place forms). A buffer named twice gets one copy, so in-place calls stay in place.
class Staging {
 public:
  const void* in(const void* device, size_t bytes) { return copy(const_cast<void*>(device), bytes, true, false); }
  void* out(void* device, size_t bytes, bool initial = false) { return copy(device, bytes, initial, true); }
  void finish() {
    for (Buffer& b : buffers_)
      if (b.written) std::memcpy(b.device, b.host.data(), b.host.size());
  }

 private:
  struct Buffer {
    void* device;
    std::vector<char> host;
    bool written;
  };
  void* copy(void* device, size_t bytes, bool initial, bool written) {
    for (Buffer& b : buffers_)
      if (b.device == device && b.host.size() == bytes) {
        b.written |= written;
        return b.host.data();
      }
    Buffer& b = buffers_.emplace_back(Buffer{device, std::vector<char>(bytes), written});
    if (initial) std::memcpy(b.host.data(), device, bytes);
    return b.host.data();
  }
  std::vector<Buffer> buffers_;
};

// A collected call: posts its nonblocking MPI call on the group's staging when the group runs
// on its stream.
using Post = std::function<MPI_Request(Staging&)>;

struct Collected {
  ncclComm_t comm;
  cudaStream_t stream;
  const char* function;
  Post post;
  cpu::NcclSignature signature;
};

thread_local int group_depth = 0;
thread_local std::vector<Collected> collected;

// Waits for requests without holding a CPU. MPICH's blocking calls (MPI_Wait, MPI_Allreduce)
// poll in a loop, so a rank waiting for a slower peer takes a whole core; with more ranks
// than cores (4 ranks on 2 cores) that starves the very rank it waits for. So: spin for up
// to 50 us, which catches a peer that is already there, then test (MPI_Testall also drives
// MPI's progress) between sleeps that double from 1 us up to 1 ms: a waiting rank costs next
// to no CPU, and a completion is noticed at most about 1 ms late. Gives up (false) once any of
// the communicators is aborted, leaving its requests to the process's end.
bool wait_without_spinning(std::vector<MPI_Request>& requests, const std::vector<ncclComm_t>& comms = {}) {
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

void change_in_flight(ncclComm_t comm, int change) {
  std::lock_guard<std::mutex> lock(comm->mutex);
  comm->in_flight += change;
  if (comm->in_flight == 0) comm->idle.notify_all();
}

void wait_until_idle(ncclComm_t comm) {
  std::unique_lock<std::mutex> lock(comm->mutex);
  comm->idle.wait(lock, [comm] { return comm->in_flight == 0; });
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
// cpu/nccl_call_matching.h) and the calls before it in its channel are posted: a call waits for its own
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

// Every rank of comm has arrived; lets a blocking MPI call that follows return at once
// instead of spinning while a peer is still busy.
void arrive_together(MPI_Comm comm) {
  std::vector<MPI_Request> barrier(1);
  MPI_Ibarrier(comm, &barrier[0]);
  wait_without_spinning(barrier);
}

// NCCL refuses a communicator in which two ranks of one node use the same device. A node here
// is a host name; every rank of mpi takes part.
ncclResult_t check_devices_distinct(MPI_Comm mpi, int device, const char* function) {
  // A GPU is one physical device whatever its number in each process (CUDA_VISIBLE_DEVICES), so
  // the peers' UUIDs are compared, as NCCL compares their host and bus ids.
  struct Place {
    char uuid[16];
    int device;
  } own{};
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, std::string(function) + ": cudaGetDeviceProperties of device " +
                                            std::to_string(device) + " failed");
  std::memcpy(own.uuid, properties.uuid.bytes, sizeof own.uuid);
  own.device = device;
  int size = 0;
  MPI_Comm_size(mpi, &size);
  std::vector<Place> places(size);
  std::vector<MPI_Request> gather(1);
  MPI_Iallgather(&own, sizeof own, MPI_BYTE, places.data(), sizeof own, MPI_BYTE, mpi, &gather[0]);
  wait_without_spinning(gather);
  for (int r = 0; r < size; ++r)
    for (int q = 0; q < r; ++q)
      if (std::memcmp(places[r].uuid, places[q].uuid, sizeof own.uuid) == 0)
        return fail(ncclInvalidUsage, std::string(function) + ": Duplicate GPU detected : rank " + std::to_string(r) +
                                          " and rank " + std::to_string(q) + " both on one GPU (CUDA device " +
                                          std::to_string(places[r].device) + " and " + std::to_string(places[q].device) +
                                          " of theirs; each rank of a node selects its own device with cudaSetDevice "
                                          "before NCCL)");
  return ncclSuccess;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* version) {
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (a kernel failed earlier)";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument (see ncclGetLastError)";
    case ncclInvalidUsage: return "invalid usage (see ncclGetLastError)";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return last_error.c_str(); }

// An id names one communicator: the creator's world rank and a count of the ids it made.
ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (ncclResult_t r = check_usable("ncclGetUniqueId"); r != ncclSuccess) return r;
  static uint64_t ids_made = 0;
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::memset(id, 0, sizeof(*id));
  std::snprintf(id->internal, sizeof(id->internal), "cpu-nccl rank %d id %llu", world_rank,
                static_cast<unsigned long long>(ids_made++));
  return ncclSuccess;
}

// The ranks that pass the same id form the communicator, ordered by rank. This is one
// MPI_Comm_split of MPI_COMM_WORLD keyed by the id, so in the CPU build EVERY world rank
// must call ncclCommInitRank at the same time, each with the id of its own group.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (ncclResult_t r = check_usable("ncclCommInitRank"); r != ncclSuccess) return r;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of nranks " +
                                         std::to_string(nranks) + " is out of range");
  int world_size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<ncclUniqueId> ids(world_size);  // (world_size) every rank's id
  std::vector<MPI_Request> gather(1);
  MPI_Iallgather(&id, sizeof(id), MPI_BYTE, ids.data(), sizeof(id), MPI_BYTE, MPI_COMM_WORLD, &gather[0]);
  wait_without_spinning(gather);
  // Distinct ids give distinct colors: the first world rank that holds the same id.
  int color = 0;
  while (std::memcmp(&ids[color], &id, sizeof(id)) != 0) ++color;
  MPI_Comm mpi;
  MPI_Comm_split(MPI_COMM_WORLD, color, rank, &mpi);
  int size = 0, mpi_rank = 0;
  MPI_Comm_size(mpi, &size);
  MPI_Comm_rank(mpi, &mpi_rank);
  if (size != nranks || mpi_rank != rank) {
    MPI_Comm_free(&mpi);
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: " + std::to_string(size) + " world ranks passed this id, as ranks that are not 0.." +
                    std::to_string(nranks - 1) + " each once (this rank passed rank " + std::to_string(rank) +
                    " of nranks " + std::to_string(nranks) +
                    "); in the CPU build every world rank must call ncclCommInitRank at once, each with its group's id");
  }
  const int device = cpu::current_device();
  if (ncclResult_t r = check_devices_distinct(mpi, device, "ncclCommInitRank"); r != ncclSuccess) {
    MPI_Comm_free(&mpi);
    return r;
  }
  *comm = new ncclComm{mpi, device};
  return ncclSuccess;
}

// config is ignored: the CPU build has nothing to configure. The new communicator has the
// parent's device; the split waits for the parent's queued work, whose MPI calls share its comm.
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit"); r != ncclSuccess) return r;
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return fail(ncclInvalidArgument, "ncclCommSplit: color " + std::to_string(color) + " is negative");
  wait_until_idle(comm);
  arrive_together(comm->mpi);
  MPI_Comm mpi;
  MPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &mpi);
  *newcomm = mpi == MPI_COMM_NULL ? nullptr : new ncclComm{mpi, comm->device};
  return ncclSuccess;
}

// As NCCL's destroy, waits for the communicator's queued work (which may wait for peers). A
// communicator that failed (CUDA_CPU_NCCL_CHECK) may have messages no rank will receive: data a
// partner's failed group never posted the receive of, signatures a rank that failed first never
// took in. MPI gives a freed communicator's context to the next one made, whose receives would
// take those messages for their own (garbage, or MPI_ERR_TRUNCATE); so its MPI communicators are
// never freed, as after ncclCommAbort, and nothing of it can reach a later communicator.
ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  wait_until_idle(comm);
  if (comm->async_error == ncclSuccess) {
    if (comm->check_mpi != MPI_COMM_NULL) MPI_Comm_free(&comm->check_mpi);
    MPI_Comm_free(&comm->mpi);
  }
  delete comm;
  return ncclSuccess;
}

// Queued work stops waiting for its peers and fails (a sticky error, as a GPU's kernels would).
// Then, as NCCL's clean-up synchronises the device, the abort waits for the operations of the
// device's other communicators that have begun (cpu/nccl_device.h): one stuck on a peer that
// never comes blocks it for ever, as on a GPU, so a caller aborts that communicator first. The
// communicator, its MPI communicators (whose contexts so stay out of later communicators' reach)
// and its pending MPI requests are left to the process's end.
ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->aborted = true;
  cpu::wake_nccl_waiters(comm->device);
  cpu::wait_for_other_communicators(comm->device, comm);
  return ncclSuccess;
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (ncclResult_t r = check_comm(comm, "ncclCommGetAsyncError"); r != ncclSuccess) return r;
  *async_error = comm->async_error;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (ncclResult_t r = check_comm(comm, "ncclCommCount"); r != ncclSuccess) return r;
  *count = comm_size(comm);
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (ncclResult_t r = check_comm(comm, "ncclCommUserRank"); r != ncclSuccess) return r;
  *rank = comm_rank(comm);
  return ncclSuccess;
}

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

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(peer, comm, "ncclSend", "peer"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclSend");
  const int n = mpi_count(count, "ncclSend");
  cpu::count_nccl_call(count * e.bytes);
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclSend", "sendbuff"); r != ncclSuccess) return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::send, datatype, count, -1, -1, peer);
  return submit(comm, stream, "ncclSend", signature, [=](Staging& staging) {
    MPI_Request request;
    MPI_Isend(staging.in(sendbuff, count * e.bytes), n, e.mpi, peer, 0, comm->mpi, &request);
    return request;
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(peer, comm, "ncclRecv", "peer"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclRecv");
  const int n = mpi_count(count, "ncclRecv");
  cpu::count_nccl_call(0);
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclRecv", "recvbuff"); r != ncclSuccess) return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::recv, datatype, count, -1, -1, peer);
  return submit(comm, stream, "ncclRecv", signature, [=](Staging& staging) {
    MPI_Request request;
    MPI_Irecv(staging.out(recvbuff, count * e.bytes), n, e.mpi, peer, 0, comm->mpi, &request);
    return request;
  });
}

// In place when sendbuff == recvbuff.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllReduce"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclAllReduce");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclAllReduce");
  const int n = mpi_count(count, "ncclAllReduce");
  cpu::count_nccl_call(count * e.bytes);
  const bool in_place = sendbuff == recvbuff;
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclAllReduce", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclAllReduce", "recvbuff"); r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::all_reduce, datatype, count, op);
  return submit(comm, stream, "ncclAllReduce", signature, [=](Staging& staging) {
    const size_t bytes = count * e.bytes;
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, bytes);
    MPI_Request request;
    MPI_Iallreduce(in, staging.out(recvbuff, bytes, in_place), n, e.mpi, mpi_op, comm->mpi, &request);
    return request;
  });
}

// sendbuff: (nranks, recvcount); recvbuff: (recvcount), this rank's row of the sum. In place
// (recvbuff inside sendbuff) needs nothing more: MPI gets separate host copies of the two.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclReduceScatter"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclReduceScatter");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclReduceScatter");
  const int n = mpi_count(recvcount, "ncclReduceScatter");
  const size_t send_bytes = comm_size(comm) * recvcount * e.bytes;
  cpu::count_nccl_call(send_bytes);
  if (ncclResult_t r = check_buffer(sendbuff, send_bytes, comm, "ncclReduceScatter", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, recvcount * e.bytes, comm, "ncclReduceScatter", "recvbuff");
      r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::reduce_scatter, datatype, recvcount, op);
  return submit(comm, stream, "ncclReduceScatter", signature, [=](Staging& staging) {
    MPI_Request request;
    MPI_Ireduce_scatter_block(staging.in(sendbuff, send_bytes), staging.out(recvbuff, recvcount * e.bytes), n, e.mpi,
                              mpi_op, comm->mpi, &request);
    return request;
  });
}

// sendbuff: (sendcount); recvbuff: (nranks, sendcount), row r from rank r. In place when
// sendbuff is this rank's row of recvbuff, which is also MPI's in-place form.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllGather"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclAllGather");
  const int n = mpi_count(sendcount, "ncclAllGather");
  cpu::count_nccl_call(sendcount * e.bytes);
  const char* own_row = static_cast<const char*>(recvbuff) + comm_rank(comm) * sendcount * e.bytes;
  const bool in_place = sendbuff == own_row;
  if (ncclResult_t r = check_buffer(sendbuff, sendcount * e.bytes, comm, "ncclAllGather", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, comm_size(comm) * sendcount * e.bytes, comm, "ncclAllGather", "recvbuff");
      r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::all_gather, datatype, sendcount);
  return submit(comm, stream, "ncclAllGather", signature, [=](Staging& staging) {
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, sendcount * e.bytes);
    MPI_Request request;
    MPI_Iallgather(in, n, e.mpi, staging.out(recvbuff, comm_size(comm) * sendcount * e.bytes, in_place), n, e.mpi,
                   comm->mpi, &request);
    return request;
  });
}

// The root's sendbuff is copied to its recvbuff when they differ; MPI broadcasts in place.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclBroadcast"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(root, comm, "ncclBroadcast", "root"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclBroadcast");
  const int n = mpi_count(count, "ncclBroadcast");
  cpu::count_nccl_call(count * e.bytes);
  const bool copy_first = comm_rank(comm) == root && sendbuff != recvbuff;
  if (comm_rank(comm) == root)
    if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclBroadcast", "sendbuff"); r != ncclSuccess)
      return r;
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclBroadcast", "recvbuff"); r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::broadcast, datatype, count, -1, root);
  return submit(comm, stream, "ncclBroadcast", signature, [=](Staging& staging) {
    if (copy_first) std::memcpy(recvbuff, sendbuff, count * e.bytes);
    MPI_Request request;
    MPI_Ibcast(staging.out(recvbuff, count * e.bytes, comm_rank(comm) == root), n, e.mpi, root, comm->mpi, &request);
    return request;
  });
}

// recvbuff is used only on root; in place when the root's sendbuff == recvbuff.
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclReduce"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(root, comm, "ncclReduce", "root"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclReduce");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclReduce");
  const int n = mpi_count(count, "ncclReduce");
  cpu::count_nccl_call(count * e.bytes);
  const bool is_root = comm_rank(comm) == root, in_place = is_root && sendbuff == recvbuff;
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclReduce", "sendbuff"); r != ncclSuccess)
    return r;
  if (comm_rank(comm) == root)
    if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclReduce", "recvbuff"); r != ncclSuccess)
      return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::reduce, datatype, count, op, root);
  return submit(comm, stream, "ncclReduce", signature, [=](Staging& staging) {
    const size_t bytes = count * e.bytes;
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, bytes);
    void* out = is_root ? staging.out(recvbuff, bytes, in_place) : nullptr;  // only the root's is used
    MPI_Request request;
    MPI_Ireduce(in, out, n, e.mpi, mpi_op, root, comm->mpi, &request);
    return request;
  });
}

}  // extern "C"
