// What this rank (process) has asked of its device, counted by the CPU build so that tests and
// benchmarks can say what a training step costs on a GPU: calls that block the host until device
// work is done (stream, device and event synchronisation, copies that wait, allocations and
// frees), allocations and frees themselves (each synchronises the device on a GPU), kernel
// launches, and NCCL calls and their bytes. Counts only grow; a caller takes the difference around what it measures.
#pragma once
#include <nccl.h>

#include <cstdint>

namespace cpu {

// The NCCL calls, by kind, so that a step's messages and collectives can be told apart (and the
// collective matching, cpu/nccl/nccl_call_matching.h, names a call by it).
enum class NcclCall : int32_t { send, recv, all_reduce, reduce_scatter, all_gather, broadcast, reduce, kinds };
const char* nccl_call_name(NcclCall kind);

struct CallCounts {
  uint64_t host_waits = 0;
  uint64_t launches = 0;    // kernels, and cuBLAS calls (each at least one kernel on a GPU)
  uint64_t nccl_calls = 0;  // ncclSend, ncclRecv and the collectives, each call once (a group's calls each)
  uint64_t nccl_bytes = 0;  // what those calls hand to NCCL: a send's bytes, a collective's input, 0 for a receive
  uint64_t allocations = 0;  // cudaMalloc and cudaMallocHost (pinned) calls
  uint64_t frees = 0;        // cudaFree and cudaFreeHost calls
  uint64_t nccl_calls_of[int(NcclCall::kinds)] = {};  // nccl_calls and nccl_bytes by kind
  uint64_t nccl_bytes_of[int(NcclCall::kinds)] = {};
};
CallCounts call_counts();

// The NCCL calls made on one communicator and their bytes, counted as nccl_calls and nccl_bytes
// are: what tells one communicator's collectives from another's of the same kind (a step's
// tensor-parallel all-reduces from its data-parallel ones). Counts only grow.
struct NcclCommCounts {
  uint64_t calls = 0, bytes = 0;
};
NcclCommCounts nccl_comm_counts(ncclComm_t comm);

void count_host_wait();
void count_launch();
void count_nccl_call(NcclCall kind, uint64_t bytes);
void count_allocation();
void count_free();

}  // namespace cpu
