// The CPU build refuses what a GPU machine refuses: several devices per node, memory that belongs
// to one device, device memory the host cannot read (strict mode), streams that run asynchronously
// (and, with a delay, late enough that a missing synchronisation reads unfinished results).
#include <cublas_v2.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <future>
#include <vector>

#include "cpu/runtime/devices.h"
#include "cpu/runtime/settings.h"
#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

// The rules between devices need several in one process: the limit of one (cpu/runtime/devices.h) is
// raised, and the devices used are forgotten afterwards.
class GpuRules : public testing::Test {
 protected:
  // Death tests re-execute the binary and run only the dying test: no stream worker is inherited.
  void SetUp() override {
    GTEST_FLAG_SET(death_test_style, "threadsafe");
    cpu::settings().devices_per_process = 8;
  }
  void TearDown() override {
    cpu::settings() = saved_;
    CUDA_CHECK(cudaSetDevice(0));
    cpu::forget_devices_used();
  }
  cpu::Settings saved_ = cpu::settings();
};

__global__ void fill(float* out, float value, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

TEST_F(GpuRules, ANodeHasEightDevicesByDefaultAndRefusesOthers) {
  int count = 0;
  CUDA_CHECK(cudaGetDeviceCount(&count));
  EXPECT_EQ(count, 8);
  EXPECT_EQ(cudaSetDevice(count), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaSetDevice(-1), cudaErrorInvalidDevice);
  (void)cudaGetLastError();
  CUDA_CHECK(cudaSetDevice(3));
  int device = -1;
  CUDA_CHECK(cudaGetDevice(&device));
  EXPECT_EQ(device, 3);
}

TEST_F(GpuRules, ACopyGivenAnotherDevicesMemoryFails) {
  CUDA_CHECK(cudaSetDevice(1));
  DeviceBuffer<float> on_one(4);
  CUDA_CHECK(cudaSetDevice(0));
  std::vector<float> host(4);
  EXPECT_EQ(cudaMemcpy(host.data(), on_one.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
  EXPECT_EQ(cudaMemset(on_one.data(), 0, 4 * sizeof(float)), cudaErrorInvalidValue);
  (void)cudaGetLastError();
  CUDA_CHECK(cudaSetDevice(1));
  EXPECT_EQ(cudaMemcpy(host.data(), on_one.data(), 4 * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
}

// A GEMM on device 0 of matrices on device 1: exits 0 when cuBLAS fails it and the context is lost.
void sgemm_across_devices() {
  CUDA_CHECK(cudaSetDevice(1));
  DeviceBuffer<float> a(4), b(4), c(4);
  CUDA_CHECK(cudaSetDevice(0));
  cublasHandle_t handle;
  cublasCreate(&handle);
  const float one = 1, zero = 0;
  const cublasStatus_t status =
      cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.data(), 2, b.data(), 2, &zero, c.data(), 2);
  std::exit(status == CUBLAS_STATUS_EXECUTION_FAILED && cudaDeviceSynchronize() == cudaErrorIllegalAddress ? 0 : 1);
}

// On a GPU the GEMM's kernel faults on another device's memory and the context is lost.
TEST_F(GpuRules, ACublasCallGivenAnotherDevicesMemoryFails) {
  EXPECT_EXIT(sgemm_across_devices(), testing::ExitedWithCode(0),
              "cublasSgemmStridedBatched on device 0: A .* is not inside one allocation");
}

TEST_F(GpuRules, StrictMemoryCatchesTheHostReadingDeviceMemory) {
  cpu::settings().strict_memory = true;
  DeviceBuffer<float> buffer(16);
  EXPECT_DEATH({ std::printf("%f\n", buffer.data()[5]); },
               "CUDA_CPU_STRICT_MEMORY: host code touched device memory at 0x[0-9a-f]+ \\(byte 20 of a 64-byte "
               "allocation on device 0\\)");
}

TEST_F(GpuRules, StrictMemoryCatchesAKernelTouchingAnotherDevicesMemory) {
  cpu::settings().strict_memory = true;
  CUDA_CHECK(cudaSetDevice(1));
  DeviceBuffer<float> on_one(32);
  CUDA_CHECK(cudaSetDevice(0));
  EXPECT_DEATH(
      {
        launch(fill, dim3(1), dim3(32), 0, nullptr, on_one.data(), 1.0f, 32);
        CUDA_CHECK(cudaDeviceSynchronize());
      },
      "kernel .*fill\\(float\\*, float, int\\) on device 0 touched device memory at .* allocation on device 1\\) that is not its device's");
}

TEST_F(GpuRules, StrictMemoryLetsKernelsCopiesAndTheHostsCopiesThrough) {
  cpu::settings().strict_memory = true;
  DeviceBuffer<float> buffer(64);
  launch(fill, dim3(2), dim3(32), 0, nullptr, buffer.data(), 2.5f, 64);
  EXPECT_EQ(buffer.to_host(), std::vector<float>(64, 2.5f));
}

// A kernel on a stream, then a copy to pinned host memory on the same stream, both asynchronous:
// without a synchronisation the host reads what was there before.
TEST_F(GpuRules, StreamDelayExposesAMissingSynchronisation) {
  cpu::settings().stream_delay_us = 100000;  // the host reads within microseconds; the copy is 0.2 s away
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceBuffer<float> device(8);
  float* pinned = nullptr;
  CUDA_CHECK(cudaMallocHost(&pinned, 8 * sizeof(float)));
  for (bool synchronise : {false, true}) {
    for (int i = 0; i < 8; ++i) pinned[i] = -1.0f;
    launch(fill, dim3(1), dim3(8), 0, stream, device.data(), synchronise ? 2.0f : 1.0f, 8);
    CUDA_CHECK(cudaMemcpyAsync(pinned, device.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost, stream));
    if (synchronise) CUDA_CHECK(cudaStreamSynchronize(stream));
    EXPECT_EQ(pinned[7], synchronise ? 2.0f : -1.0f) << (synchronise ? "with" : "without") << " synchronisation";
    CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  CUDA_CHECK(cudaFreeHost(pinned));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// CUDA's rules for when a copy returns: to pageable host memory once done, from it once staged
// (the host may overwrite its buffer at once).
TEST_F(GpuRules, CopiesWithPageableMemoryFollowCudasRules) {
  cpu::settings().stream_delay_us = 20000;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceBuffer<float> device(8);
  std::vector<float> host(8, 3.0f), back(8, -1.0f);
  CUDA_CHECK(cudaMemcpyAsync(device.data(), host.data(), 8 * sizeof(float), cudaMemcpyHostToDevice, stream));
  host.assign(8, 4.0f);  // after staging: the device still gets 3
  CUDA_CHECK(cudaMemcpyAsync(back.data(), device.data(), 8 * sizeof(float), cudaMemcpyDeviceToHost, stream));
  EXPECT_EQ(back, std::vector<float>(8, 3.0f));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// Holds a stream at a host function until the test opens it.
struct Gate {
  std::promise<void> open;
  std::shared_future<void> opened = open.get_future().share();
  static void wait(void* gate) { static_cast<Gate*>(gate)->opened.wait(); }
};

// Events order two streams: a consumer that waits for the producer's event sees its result, one
// that does not runs ahead of it (the producer is held at a gate meanwhile).
TEST_F(GpuRules, EventsOrderStreamsAndStreamsRunAheadOfEachOther) {
  cudaStream_t producer, consumer;
  CUDA_CHECK(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking));
  CUDA_CHECK(cudaStreamCreateWithFlags(&consumer, cudaStreamNonBlocking));
  cudaEvent_t ready;
  CUDA_CHECK(cudaEventCreate(&ready));
  DeviceBuffer<float> a(8), b(8);
  for (bool wait : {false, true}) {
    CUDA_CHECK(cudaMemset(a.data(), 0, 8 * sizeof(float)));
    CUDA_CHECK(cudaMemset(b.data(), 0, 8 * sizeof(float)));
    CUDA_CHECK(cudaDeviceSynchronize());
    Gate gate;
    CUDA_CHECK(cudaLaunchHostFunc(producer, Gate::wait, &gate));
    launch(fill, dim3(1), dim3(8), 0, producer, a.data(), 5.0f, 8);
    CUDA_CHECK(cudaEventRecord(ready, producer));
    if (wait) CUDA_CHECK(cudaStreamWaitEvent(consumer, ready, 0));
    EXPECT_EQ(cudaEventQuery(ready), cudaErrorNotReady);
    CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), 8 * sizeof(float), cudaMemcpyDeviceToDevice, consumer));
    if (!wait) CUDA_CHECK(cudaStreamSynchronize(consumer));
    gate.open.set_value();
    CUDA_CHECK(cudaDeviceSynchronize());
    EXPECT_EQ(b.to_host()[0], wait ? 5.0f : 0.0f) << (wait ? "with" : "without") << " the event";
  }
  CUDA_CHECK(cudaEventDestroy(ready));
  CUDA_CHECK(cudaStreamDestroy(producer));
  CUDA_CHECK(cudaStreamDestroy(consumer));
}

// The legacy default stream waits for blocking streams: a synchronous copy sees the kernel's result.
TEST_F(GpuRules, TheLegacyDefaultStreamWaitsForBlockingStreams) {
  cpu::settings().stream_delay_us = 20000;
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  DeviceBuffer<float> device(8);
  launch(fill, dim3(1), dim3(8), 0, stream, device.data(), 7.0f, 8);
  EXPECT_EQ(device.to_host(), std::vector<float>(8, 7.0f));
  CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST_F(GpuRules, MemGetInfoMovesInPagesOfTwoMebibytes) {
  size_t free_before, free_after, total;
  CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  std::vector<DeviceBuffer<char>*> small;
  for (int i = 0; i < 3; ++i) small.push_back(new DeviceBuffer<char>(1000));
  CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ((free_before - free_after) % (size_t(2) << 20), 0u);
  for (auto* buffer : small) delete buffer;
}

}  // namespace
