// The counting device allocator (kernels/device_memory.cuh).
#include "kernels/device_memory.cuh"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <unordered_map>

#include "kernels/cuda_check.cuh"

namespace {

struct Ledger {
  std::mutex mutex;  // any host thread may allocate
  std::unordered_map<void*, size_t> bytes_of;  // every live allocation's size (not the null of a 0-byte one)
  DeviceMemoryCounts counts{0, 0, 0};
};

// Never destroyed: a static object's destructor may free device memory after this one's.
Ledger& ledger() {
  static Ledger* const the_ledger = new Ledger;
  return *the_ledger;
}

}  // namespace

void* device_alloc_bytes(size_t bytes) {
  void* pointer = nullptr;
  CUDA_CHECK(cudaMalloc(&pointer, bytes));
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  if (pointer != nullptr) l.bytes_of[pointer] = bytes;
  l.counts.bytes_in_use += bytes;
  l.counts.peak_bytes = std::max(l.counts.peak_bytes, l.counts.bytes_in_use);
  ++l.counts.allocations;
  return pointer;
}

void device_free(void* pointer) {
  if (pointer == nullptr) return;
  Ledger& l = ledger();
  {
    std::lock_guard<std::mutex> lock(l.mutex);
    const auto found = l.bytes_of.find(pointer);
    if (found == l.bytes_of.end()) {
      std::fprintf(stderr, "device_free: %p was not allocated by device_alloc (or was freed already)\n", pointer);
      std::exit(EXIT_FAILURE);
    }
    l.counts.bytes_in_use -= found->second;
    l.bytes_of.erase(found);
  }
  CUDA_CHECK(cudaFree(pointer));
}

DeviceMemoryCounts device_memory_counts() {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  return l.counts;
}

void reset_device_memory_peak() {
  Ledger& l = ledger();
  std::lock_guard<std::mutex> lock(l.mutex);
  l.counts.peak_bytes = l.counts.bytes_in_use;
}
