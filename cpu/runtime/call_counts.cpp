// The CPU build's per-rank call counts (cpu/runtime/call_counts.h).
#include "cpu/runtime/call_counts.h"

#include <atomic>

namespace cpu {
namespace {

std::atomic<uint64_t> host_waits{0}, launches{0}, nccl_calls{0}, nccl_bytes{0}, allocations{0}, frees{0};

}  // namespace

CallCounts call_counts() {
  return {host_waits.load(), launches.load(), nccl_calls.load(), nccl_bytes.load(), allocations.load(), frees.load()};
}

void count_host_wait() { host_waits.fetch_add(1, std::memory_order_relaxed); }
void count_launch() { launches.fetch_add(1, std::memory_order_relaxed); }
void count_nccl_call(uint64_t bytes) {
  nccl_calls.fetch_add(1, std::memory_order_relaxed);
  nccl_bytes.fetch_add(bytes, std::memory_order_relaxed);
}
void count_allocation() { allocations.fetch_add(1, std::memory_order_relaxed); }
void count_free() { frees.fetch_add(1, std::memory_order_relaxed); }

}  // namespace cpu
