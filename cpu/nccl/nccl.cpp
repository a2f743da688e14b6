// NCCL on the CPU, over MPI. A communicator is an MPI communicator on one device (the current one
// when it was made); every send, receive and collective is a nonblocking MPI call. Calls between
// ncclGroupStart and the outermost ncclGroupEnd are only collected, then queued on their stream as
// one operation that posts them all at once and completes them together, so a group that cannot
// deadlock in NCCL cannot deadlock here. As in NCCL, a call returns once its work is queued: it
// runs on the stream's worker thread, so MPI must be initialised with MPI_THREAD_MULTIPLE. Buffers
// must be memory of the communicator's device, and two ranks of one node may not share a device
// (NCCL's "Duplicate GPU detected"). MPI errors abort (MPI_ERRORS_ARE_FATAL). MPI itself sees
// only host copies of the buffers (Staging, cpu/nccl/nccl_internal.h): its progress engine runs in
// whichever thread calls MPI next, and with CUDA_CPU_STRICT_MEMORY only the stream's worker may
// touch device memory.
//
// This file: the communicators (creation, split, destroy, abort, queries) and the checks every
// call makes; cpu/nccl/nccl_groups.cpp queues calls on their streams, cpu/nccl/nccl_operations.cpp holds the
// point-to-point calls and collectives.
#include <mpi.h>
#include <nccl.h>

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/runtime/memory.h"
#include "cpu/nccl/nccl_device.h"
#include "cpu/nccl/nccl_internal.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/streams.h"

namespace cpu::nccl {
namespace {

thread_local std::string last_error;  // what ncclGetLastError returns

}  // namespace

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
// MPI counts are ints; the CPU build never moves 2^31 elements in one call.
int mpi_count(size_t count, const char* function) {
  if (count > INT_MAX) cpu::unsupported((std::string(function) + " with a count above INT_MAX").c_str());
  return static_cast<int>(count);
}
}  // namespace cpu::nccl

using namespace cpu::nccl;

namespace {

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
  const std::string caller = function;
  cudaDeviceProp properties;
  if (cudaGetDeviceProperties(&properties, device) != cudaSuccess)
    return fail(ncclUnhandledCudaError, caller + ": cudaGetDeviceProperties of device " +
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
        return fail(ncclInvalidUsage, caller + ": Duplicate GPU detected : rank " + std::to_string(r) +
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
// device's other communicators that have begun (cpu/nccl/nccl_device.h): one stuck on a peer that
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

}  // extern "C"
