// Micro-benchmark of the CPU build's kernel execution (a program, not a test):
//   1. ns per fiber switch: Boost.Context's jump_fcontext and the block scheduler's switch_fiber
//      (cpu/launch/fiber_switch.h) ping-pong, and our scheduler's cost per thread per __syncthreads;
//   2. a warp-per-row layernorm-style kernel over 4096 x 768 floats against a plain
//      C++ loop doing the same arithmetic, its row sums as xor butterflies of shuffles
//      and as cooperative_groups::reduce;
//   3. elementwise kernels without synchronisation against plain loops: as kernels of one thread
//      per element, and as bodies of launch_elementwise (kernels/elementwise.cuh), which the CPU
//      build runs as vectorised loops; and the model's GELU forward (kernels/gelu.cuh), against its
//      formula as a plain loop calling libm's expf.
// Ratios are measured in one run, in CPU time (the best of several runs); a kernel's includes its
// stream's worker (launches are asynchronous), so run with CUDA_CPU_BLOCK_THREADS=1 to compare
// with the one-threaded plain loops. Usage: CUDA_CPU_BLOCK_THREADS=1 build/cpu/tools/fiber_bench
// (make bench).
#include <boost/context/detail/fcontext.hpp>
#include <cooperative_groups.h>
#include <cooperative_groups/reduce.h>

#include <time.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "cpu/launch/fiber_switch.h"
#include "kernels/elementwise.cuh"
#include "kernels/gelu.cuh"
#include "kernels/launch.cuh"

namespace fc = boost::context::detail;

namespace {

// The CPU time of the whole process (the host thread waits asleep while the stream's worker runs
// the kernel), so that on a machine shared with other work the figures count our work only.
double process_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

// Runs f `repeats` times and returns the least CPU time of one run, in seconds.
template <typename F>
double best_of(int repeats, F f) {
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double start = process_seconds();
    f();
    best = std::min(best, process_seconds() - start);
  }
  return best;
}

// A fiber that switches straight back, by Boost's jump or by the block scheduler's.
template <auto switch_to>
void ping_pong(fc::transfer_t t) {
  for (;;) t = switch_to(t.fctx, nullptr);
}

template <auto switch_to>
double ns_per_raw_switch() {
  static char stack[64 << 10];
  fc::fcontext_t fiber = fc::make_fcontext(stack + sizeof stack, sizeof stack, ping_pong<switch_to>);
  const long switches = 20'000'000;
  double s = best_of(3, [&] {
    for (long i = 0; i < switches / 2; ++i) fiber = switch_to(fiber, nullptr).fctx;
  });
  return s / switches * 1e9;
}

__global__ void barriers(int rounds, int* sink) {
  int x = threadIdx.x;
  for (int r = 0; r < rounds; ++r) {
    x += r;
    __syncthreads();
  }
  if (x == -1) *sink = x;
}

// The sum over the warp: five shuffles, or one cooperative_groups::reduce.
template <bool kReduce>
__device__ float warp_sum(float v) {
  if (kReduce)
    return cooperative_groups::reduce(cooperative_groups::tiled_partition<32>(cooperative_groups::this_thread_block()),
                                      v, cooperative_groups::plus<float>());
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

template <bool kReduce>
__global__ void layernorm_warp_per_row(float* out, const float* in, const float* weight, const float* bias,
                                       int rows, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
  if (row >= rows) return;  // whole warps leave together: no collective waits for them
  const float* x = in + size_t(row) * C;
  float sum = 0.0f;
  for (int c = lane; c < C; c += 32) sum += x[c];
  sum = warp_sum<kReduce>(sum);
  const float mean = sum / C;
  float var = 0.0f;
  for (int c = lane; c < C; c += 32) var += (x[c] - mean) * (x[c] - mean);
  var = warp_sum<kReduce>(var);
  const float rstd = rsqrtf(var / C + 1e-5f);
  for (int c = lane; c < C; c += 32) out[size_t(row) * C + c] = (x[c] - mean) * rstd * weight[c] + bias[c];
}

void layernorm_loop(float* out, const float* in, const float* weight, const float* bias, int rows, int C) {
  for (int row = 0; row < rows; ++row) {
    const float* x = in + size_t(row) * C;
    float sum = 0.0f;
    for (int c = 0; c < C; ++c) sum += x[c];
    const float mean = sum / C;
    float var = 0.0f;
    for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
    const float rstd = 1.0f / std::sqrt(var / C + 1e-5f);
    for (int c = 0; c < C; ++c) out[size_t(row) * C + c] = (x[c] - mean) * rstd * weight[c] + bias[c];
  }
}

__global__ void scale_shift(float* out, const float* in, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 1.5f + 0.25f;
}

void scale_shift_loop(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = in[i] * 1.5f + 0.25f;
}

__device__ __host__ inline float gelu(float x) {
  const float k = 0.7978845608f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(k * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_kernel(float* out, const float* in, size_t n) {
  const size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = gelu(in[i]);
}

void gelu_loop(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = gelu(in[i]);
}

struct ScaleShift {
  float* out;
  const float* in;
  __device__ void operator()(size_t i) const { out[i] = in[i] * 1.5f + 0.25f; }
};

// kernels/gelu.cu's forward, x sigmoid(2u), written as a plain loop with libm's expf.
void model_gelu_loop(float* out, const float* in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    const float x = in[i];
    const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
    const float e = expf(-2 * (u < 0 ? -u : u));
    out[i] = x * (u >= 0 ? 1 / (1 + e) : e / (1 + e));
  }
}

}  // namespace

int main() {
  const int rows = 4096, C = 768;
  const size_t n = size_t(rows) * C;
  std::vector<float> host(n), weight(C, 1.1f), bias(C, 0.1f), out_loop(n);
  for (size_t i = 0; i < n; ++i) host[i] = float(i % 101) * 0.01f;
  float *d_in, *d_out, *d_w, *d_b;
  int* sink;
  CUDA_CHECK(cudaMalloc(&d_in, n * 4));
  CUDA_CHECK(cudaMalloc(&d_out, n * 4));
  CUDA_CHECK(cudaMalloc(&d_w, C * 4));
  CUDA_CHECK(cudaMalloc(&d_b, C * 4));
  CUDA_CHECK(cudaMalloc(&sink, 4));
  CUDA_CHECK(cudaMemcpy(d_in, host.data(), n * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_w, weight.data(), C * 4, cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemcpy(d_b, bias.data(), C * 4, cudaMemcpyHostToDevice));

  std::printf("fiber switch (Boost.Context jump_fcontext ping-pong): %.1f ns\n", ns_per_raw_switch<fc::jump_fcontext>());
  std::printf("fiber switch (cpu::switch_fiber ping-pong): %.1f ns\n", ns_per_raw_switch<cpu::switch_fiber>());
  const int threads = 256, rounds = 2000;
  double s = best_of(3, [&] {
    launch(barriers, dim3(1), dim3(threads), 0, nullptr, rounds, sink);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  });
  std::printf("__syncthreads, per thread per barrier (%d threads): %.1f ns\n", threads, s / (double(rounds) * threads) * 1e9);

  const double loop = best_of(5, [&] { layernorm_loop(out_loop.data(), host.data(), weight.data(), bias.data(), rows, C); });
  for (bool reduce : {false, true}) {
    const double kernel = best_of(5, [&] {
      if (reduce) launch(layernorm_warp_per_row<true>, dim3(rows / 8), dim3(256), 0, nullptr, d_out, d_in, d_w, d_b, rows, C);
      else launch(layernorm_warp_per_row<false>, dim3(rows / 8), dim3(256), 0, nullptr, d_out, d_in, d_w, d_b, rows, C);
      CUDA_CHECK(cudaStreamSynchronize(nullptr));
    });
    std::printf("layernorm warp-per-row %d x %d, row sums by %s: kernel %.2f ms, plain loop %.2f ms, ratio %.2fx\n",
                rows, C, reduce ? "cooperative_groups::reduce" : "10 shuffles", kernel * 1e3, loop * 1e3,
                kernel / loop);
  }

  const double kernel2 = best_of(5, [&] {
    launch(scale_shift, dim3(unsigned((n + 255) / 256)), dim3(256), 0, nullptr, d_out, d_in, n);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  });
  const double loop2 = best_of(5, [&] { scale_shift_loop(out_loop.data(), host.data(), n); });
  std::printf("elementwise x*1.5+0.25, no synchronisation, %zu floats: kernel %.2f ms, plain loop %.2f ms, ratio %.2fx\n", n,
              kernel2 * 1e3, loop2 * 1e3, kernel2 / loop2);
  const double kernel3 = best_of(5, [&] {
    launch(gelu_kernel, dim3(unsigned((n + 255) / 256)), dim3(256), 0, nullptr, d_out, d_in, n);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  });
  const double loop3 = best_of(5, [&] { gelu_loop(out_loop.data(), host.data(), n); });
  std::printf("elementwise GELU, no synchronisation, %zu floats: kernel %.2f ms, plain loop %.2f ms, ratio %.2fx\n", n,
              kernel3 * 1e3, loop3 * 1e3, kernel3 / loop3);
  const double body2 = best_of(5, [&] {
    launch_elementwise(ScaleShift{d_out, d_in}, n, nullptr);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  });
  std::printf("x*1.5+0.25 as a launch_elementwise body, %zu floats: %.2f ms, plain loop %.2f ms, ratio %.2fx\n", n,
              body2 * 1e3, loop2 * 1e3, body2 / loop2);
  const double model_gelu = best_of(5, [&] {
    gelu_forward(d_out, d_in, n, nullptr);
    CUDA_CHECK(cudaStreamSynchronize(nullptr));
  });
  const double model_loop = best_of(5, [&] { model_gelu_loop(out_loop.data(), host.data(), n); });
  std::printf("the model's GELU forward (launch_elementwise), %zu floats: %.2f ms, plain loop with libm's expf %.2f ms, "
              "ratio %.2fx\n", n, model_gelu * 1e3, model_loop * 1e3, model_gelu / model_loop);
  return 0;
}
