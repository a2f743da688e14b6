// The CPU build's per-rank call counts (cpu/runtime/call_counts.h).
#include "cpu/runtime/call_counts.h"

#include <atomic>

namespace cpu {
namespace {

std::atomic<uint64_t> host_waits{0}, launches{0}, nccl_calls{0}, nccl_bytes{0}, allocations{0}, frees{0};
std::atomic<uint64_t> nccl_calls_of[int(NcclCall::kinds)], nccl_bytes_of[int(NcclCall::kinds)];

}  // namespace

const char* nccl_call_name(NcclCall kind) {
  static const char* const names[] = {"send", "recv", "all_reduce", "reduce_scatter", "all_gather", "broadcast",
                                      "reduce"};
  return names[int(kind)];
}

CallCounts call_counts() {
  CallCounts counts{host_waits.load(), launches.load(), nccl_calls.load(), nccl_bytes.load(), allocations.load(),
                    frees.load()};
  for (int kind = 0; kind < int(NcclCall::kinds); ++kind) {
    counts.nccl_calls_of[kind] = nccl_calls_of[kind].load();
    counts.nccl_bytes_of[kind] = nccl_bytes_of[kind].load();
  }
  return counts;
}

void count_host_wait() { host_waits.fetch_add(1, std::memory_order_relaxed); }
void count_launch() { launches.fetch_add(1, std::memory_order_relaxed); }
void count_nccl_call(NcclCall kind, uint64_t bytes) {
  nccl_calls.fetch_add(1, std::memory_order_relaxed);
  nccl_bytes.fetch_add(bytes, std::memory_order_relaxed);
  nccl_calls_of[int(kind)].fetch_add(1, std::memory_order_relaxed);
  nccl_bytes_of[int(kind)].fetch_add(bytes, std::memory_order_relaxed);
}
void count_allocation() { allocations.fetch_add(1, std::memory_order_relaxed); }
void count_free() { frees.fetch_add(1, std::memory_order_relaxed); }

}  // namespace cpu
