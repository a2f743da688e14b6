// The CPU build's rule for copies from pageable host memory to the device (cpu/runtime/runtime.cpp): up
// to 64 KB the source is staged and the host goes on; above, CUDA may synchronise the copy with
// its stream ("API synchronization behavior"), so the host waits for it and the call counts as a
// host wait (cpu/runtime/call_counts.h); from pinned memory no copy waits. CPU build only
// (build/cpu/tests/cpu_mpi_tests, under mpirun -np 4, each rank on its own device).
#include <gtest/gtest.h>

#include <vector>

#include "cpu/runtime/call_counts.h"
#include "cpu/runtime/settings.h"
#include "kernels/cuda_check.cuh"
#include "tests/device_buffer.h"

TEST(PageableCopies, AboveSixtyFourKilobytesTheHostWaitsFromPinnedMemoryNever) {
  constexpr size_t kLimit = 64 << 10;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceBuffer<char> device(2 * kLimit);
  std::vector<char> pageable(2 * kLimit, 1);
  char* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, 2 * kLimit));
  struct Copy {
    const char* source;
    size_t bytes;
    bool waits;
  };
  const Copy copies[] = {{pageable.data(), kLimit, false},
                         {pageable.data(), kLimit + 1, true},
                         {pinned, 2 * kLimit, false}};
  const cpu::Settings saved = cpu::settings();
  cpu::settings().stream_delay_us = 20000;  // a copy the host does not wait for is still queued after the call
  for (const Copy& copy : copies) {
    const cpu::CallCounts before = cpu::call_counts();
    CUDA_CHECK(cudaMemcpyAsync(device.data(), copy.source, copy.bytes, cudaMemcpyHostToDevice, stream));
    const cpu::CallCounts after = cpu::call_counts();
    const bool done = cudaStreamQuery(stream) == cudaSuccess;
    const char* what = copy.source == pinned ? "pinned" : "pageable";
    EXPECT_EQ(after.host_waits - before.host_waits, copy.waits ? 1u : 0u) << what << ", " << copy.bytes << " bytes";
    EXPECT_EQ(done, copy.waits) << what << ", " << copy.bytes << " bytes";
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  cpu::settings() = saved;
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(stream));
}
