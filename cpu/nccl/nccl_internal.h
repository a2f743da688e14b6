// What the files of the CPU build's NCCL share (cpu/nccl/nccl.cpp says how it works): the
// communicator, the checks of a call's arguments, the host copies MPI works on, and the queueing
// of a call on its stream (cpu/nccl/nccl_groups.cpp).
#pragma once
#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/nccl/nccl_call_matching.h"
#include "cpu/runtime/call_counts.h"
#include "cpu/runtime/settings.h"

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
  std::unique_ptr<cpu::NcclMatcher> matcher;  // CUDA_CPU_NCCL_CHECK (cpu/nccl/nccl_call_matching.h), if on when made
  int device;
  int64_t calls = 0;  // calls made on it (the host's count: CUDA_CPU_NCCL_CHECK names calls by it)
  cpu::NcclCommCounts counted;  // cpu::nccl_comm_counts: its calls and bytes, as cpu::count_nccl_call counts them
  std::atomic<bool> aborted{false};  // ncclCommAbort: queued work gives up waiting
  // An operation that failed on its stream (CUDA_CPU_NCCL_CHECK): ncclCommGetAsyncError's result,
  // and the message every later call on the communicator fails with.
  std::atomic<ncclResult_t> async_error{ncclSuccess};
  std::string async_message;  // written once, before async_error
  std::mutex mutex;
  std::condition_variable idle;
  int in_flight = 0;  // queued operations not yet completed
};

namespace cpu::nccl {

// Records message as what ncclGetLastError returns, and returns result.
ncclResult_t fail(ncclResult_t result, const std::string& message);
// MPI is initialised with MPI_THREAD_MULTIPLE and no kernel has failed.
ncclResult_t check_usable(const char* function);
// check_usable, and comm is not null.
ncclResult_t check_comm(ncclComm_t comm, const char* function);
int comm_size(ncclComm_t comm);
int comm_rank(ncclComm_t comm);
// rank is a rank of comm.
ncclResult_t check_rank(int rank, ncclComm_t comm, const char* function, const char* argument);
// NCCL works on device memory of the communicator's device.
ncclResult_t check_buffer(const void* buffer, size_t bytes, ncclComm_t comm, const char* function, const char* name);
// MPI counts are ints; the CPU build never moves 2^31 elements in one call (aborts naming function).
int mpi_count(size_t count, const char* function);

// Waits for requests without holding a CPU (cpu/nccl/nccl_groups.cpp says how); false once any of
// comms is aborted, the requests left pending.
bool wait_without_spinning(std::vector<MPI_Request>& requests, const std::vector<ncclComm_t>& comms = {});
// Returns once comm has no queued operation left.
void wait_until_idle(ncclComm_t comm);

// The host copies of one group's device buffers, made on the stream's worker (which may touch
// them). MPI's progress runs in whichever thread calls MPI next (another library's listener,
// say), and in strict memory mode no thread but the worker may touch device memory, as a GPU's
// host threads may not: so MPI gets host buffers. in() copies a buffer MPI reads; out() gives
// one MPI writes, copied back by finish() once the group completes (initial: copied in first,
// for in-place forms). A buffer named twice gets one copy, so in-place calls stay in place.
// scratch() is host memory of the group's alone, and then() work on the host copies once the
// group completes, before finish() copies back (the sums in rank order, nccl_operations.cpp).
class Staging {
 public:
  const void* in(const void* device, size_t bytes) { return copy(const_cast<void*>(device), bytes, true, false); }
  void* out(void* device, size_t bytes, bool initial = false) { return copy(device, bytes, initial, true); }
  void* scratch(size_t bytes) { return scratch_.emplace_back(bytes).data(); }  // a moved vector keeps its data
  void then(std::function<void()> work) { after_.push_back(std::move(work)); }
  void finish() {
    for (const std::function<void()>& work : after_) work();
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
  std::vector<std::vector<char>> scratch_;
  std::vector<std::function<void()>> after_;
};

// A collected call: posts its nonblocking MPI call on the group's staging when the group runs
// on its stream.
using Post = std::function<MPI_Request(Staging&)>;

// Collects the call (cpu/nccl/nccl_groups.cpp): queued on its stream at once outside a group, with
// the group at its outermost ncclGroupEnd inside one. `signature` describes the call for
// CUDA_CPU_NCCL_CHECK (its rank and number are filled in here).
ncclResult_t submit(ncclComm_t comm, cudaStream_t stream, const char* function, cpu::NcclSignature signature,
                    Post post);

}  // namespace cpu::nccl
