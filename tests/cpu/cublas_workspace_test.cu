// cuBLAS's workspace in the CPU build (cpu/blas/cublas.cpp): cublasSetWorkspace's rules (256-byte
// alignment; here also memory of the handle's device), a GEMM in the caller's workspace allocating
// nothing, cublasSetStream putting the handle back on the library's own pool, which shows as device
// memory the project did not allocate; and the trainer's GEMMs running in its planned workspace.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <vector>

#include "cpu/runtime/memory.h"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/gemm.cuh"
#include "model/config.h"
#include "pipeline/memory_plan.h"
#include "tests/device_buffer.h"
#include "trainer/step/trainer.h"

namespace {

constexpr size_t kLibraryPool = size_t(4) << 20;  // cpu/blas/cublas.cpp's kLibraryPoolBytes

size_t device_bytes() {
  CUDA_CHECK(cudaDeviceSynchronize());
  return cpu::device_memory().current_bytes;
}

// One 2 x 2 GEMM on the handle's stream, waited for.
void small_gemm(cublasHandle_t handle) {
  DeviceBuffer<float> a(4), b(4), c(4);
  const float one = 1, zero = 0;
  CUBLAS_CHECK(cublasSgemm(handle, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 2, &one, a.data(), 2, b.data(), 2, &zero, c.data(), 2));
  CUDA_CHECK(cudaDeviceSynchronize());
}

TEST(CublasWorkspace, MustBeAlignedTo256BytesAndBeTheHandlesDeviceMemory) {
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  DeviceBuffer<char> workspace(1 << 16);
  std::vector<char> host(1 << 16);
  EXPECT_EQ(cublasSetWorkspace(handle, workspace.data() + 16, 1 << 15), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSetWorkspace(handle, workspace.data(), 1 << 17), CUBLAS_STATUS_INVALID_VALUE);  // past its end
  EXPECT_EQ(cublasSetWorkspace(nullptr, workspace.data(), 1 << 16), CUBLAS_STATUS_NOT_INITIALIZED);
  EXPECT_EQ(cublasSetWorkspace(handle, workspace.data() + 256, 1 << 15), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cublasSetWorkspace(handle, workspace.data(), 1 << 16), CUBLAS_STATUS_SUCCESS);
  CUBLAS_CHECK(cublasDestroy(handle));
}

TEST(CublasWorkspace, AGemmInTheCallersWorkspaceAllocatesNothingAndSetStreamGoesBackToTheLibrarysPool) {
  cublasHandle_t handle;
  CUBLAS_CHECK(cublasCreate(&handle));
  DeviceBuffer<char> workspace(1 << 16);
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  bind_cublas(handle, stream, workspace.data(), 1 << 16);
  const size_t before = device_bytes();
  small_gemm(handle);
  EXPECT_EQ(device_bytes(), before) << "a GEMM in the caller's workspace";
  // cuBLAS's documentation: cublasSetStream resets the workspace to the default pool.
  CUBLAS_CHECK(cublasSetStream(handle, stream));
  small_gemm(handle);
  EXPECT_EQ(device_bytes(), before + kLibraryPool) << "the library's pool, at its first use";
  small_gemm(handle);
  EXPECT_EQ(device_bytes(), before + kLibraryPool) << "allocated once";
  CUBLAS_CHECK(cublasDestroy(handle));
  EXPECT_EQ(device_bytes(), before) << "freed with the handle";
  CUDA_CHECK(cudaStreamDestroy(stream));
}

// All the device memory a trainer's set-up and GEMMs take is the project's (device_alloc, the
// plan's items): no pool of cuBLAS's own. The workspace is the size the device asks for: 32 MiB,
// the CPU device being compute capability 9.
TEST(CublasWorkspace, TheTrainersGemmsRunInItsPlannedWorkspace) {
  const GPTConfig config = make_gpt_config(2, 2, 16, 16, 64);
  const size_t device_before = device_bytes();
  const size_t project_before = device_memory_counts().bytes_in_use;
  Trainer<float> trainer = create_trainer<float>(config, 2, 16, 2);
  const std::vector<int> context = {1, 2, 3};
  next_token_logits(trainer, context.data(), int(context.size()));
  EXPECT_EQ(device_bytes() - device_before, device_memory_counts().bytes_in_use - project_before)
      << "device memory besides the project's allocations";
  EXPECT_EQ(cublas_workspace_bytes(), size_t(32) << 20);
  size_t workspace = 0;
  const PipelineLayout layout{ScheduleKind::one_f_one_b, 2, 1, false, {}};
  const StageMemoryPlan plan = plan_memory(memory_plan_input(config, 2, 16, layout, trainer.groups.mesh, false, {}))[0];
  for (const MemoryItem& item : plan.device)
    if (item.name == "cuBLAS workspace") workspace = item.bytes;
  EXPECT_EQ(workspace, size_t(32) << 20);
  destroy_trainer(trainer);
}

}  // namespace
