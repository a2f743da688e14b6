// Benchmark of causal attention (a program, not a test): one fp32 forward and backward of the
// materialised kernels (kernels/attention.cuh: cuBLAS products over the (T, T) matrix) and of
// the fused ones (kernels/fused_attention.cuh: tiles, no (T, T) matrix), at the default model's
// shape (B 8, T 64, C 128, NH 4: heads of 32) and at GPT-2 124M's (B 1, T 1024, C 768, NH 12:
// heads of 64). Prints the least wall and CPU time of `repeats` runs (default 3; the first also
// pays the runtime's start-up) and the bytes each keeps from forward to backward and needs as
// scratch. Usage: build/cpu/tools/attention_bench [repeats] (make bench).
#include <cublas_v2.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/attention.cuh"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/fused_attention.cuh"

namespace {

double seconds(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

float* device_buffer(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> host(count);
  for (float& x : host) x = value(rng);
  float* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, count * sizeof(float)));
  CUDA_CHECK(cudaMemcpy(device, host.data(), count * sizeof(float), cudaMemcpyHostToDevice));
  return device;
}

struct Timing {
  double wall = 1e30, cpu = 1e30;
};

// The least wall and process CPU time of `repeats` calls of run, each waited for.
template <typename Run>
Timing best_of(int repeats, Run run) {
  Timing best;
  for (int r = 0; r < repeats; ++r) {
    const double wall = seconds(CLOCK_MONOTONIC), cpu = seconds(CLOCK_PROCESS_CPUTIME_ID);
    run();
    CUDA_CHECK(cudaDeviceSynchronize());
    best.wall = std::min(best.wall, seconds(CLOCK_MONOTONIC) - wall);
    best.cpu = std::min(best.cpu, seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu);
  }
  return best;
}

void compare(cublasHandle_t cublas, int B, int T, int C, int NH, int repeats) {
  const size_t bt = size_t(B) * T;
  float* inp = device_buffer(bt * 3 * C, 1);
  float* dout = device_buffer(bt * C, 2);
  float* out = device_buffer(bt * C, 3);
  float* dinp = device_buffer(bt * 3 * C, 4);
  const size_t saved_size = attention_saved_size(B, T, C, NH);
  const size_t scratch_size =
      std::max(attention_forward_scratch_size(B, T, C, NH), attention_backward_scratch_size(B, T, C, NH));
  float* saved = device_buffer(saved_size, 5);
  float* scratch = device_buffer(scratch_size, 6);
  const Timing materialised = best_of(repeats, [&] {
    attention_forward(cublas, out, saved, scratch, inp, B, T, C, NH, nullptr);
    attention_backward(cublas, dinp, scratch, dout, saved, B, T, C, NH, nullptr);
  });
  const size_t lse_size = fused_attention_saved_size(B, T, NH);
  const size_t dots_size = fused_attention_backward_scratch_size(B, T, NH);
  float* lse = device_buffer(lse_size, 7);
  float* dots = device_buffer(dots_size, 8);
  const Timing fused = best_of(repeats, [&] {
    fused_attention_forward(out, lse, inp, B, T, C, NH, nullptr);
    fused_attention_backward(dinp, dots, dout, inp, out, lse, B, T, C, NH, nullptr);
  });
  std::printf("B %d, T %d, C %d, NH %d (heads of %d), fp32 forward + backward:\n", B, T, C, NH, C / NH);
  std::printf("  materialised: %8.2f ms wall, %8.2f ms CPU; saved %.2f MB, scratch %.2f MB\n", 1e3 * materialised.wall,
              1e3 * materialised.cpu, 4e-6 * double(saved_size), 4e-6 * double(scratch_size));
  std::printf("  fused:        %8.2f ms wall, %8.2f ms CPU; saved %.3f MB, scratch %.3f MB\n", 1e3 * fused.wall,
              1e3 * fused.cpu, 4e-6 * double(lse_size), 4e-6 * double(dots_size));
  for (float* p : {inp, dout, out, dinp, saved, scratch, lse, dots}) cudaFree(p);
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  if (repeats < 1) {
    std::fprintf(stderr, "usage: attention_bench [repeats >= 1]\n");
    return 2;
  }
  cublasHandle_t cublas;
  CUBLAS_CHECK(cublasCreate(&cublas));
  compare(cublas, 8, 64, 128, 4, repeats);
  compare(cublas, 1, 1024, 768, 12, repeats);
  cublasDestroy(cublas);
  return 0;
}
