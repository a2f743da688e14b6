// Benchmark of the embedding backward (a program, not a test): the CPU time of one fp32
// embedding_backward (kernels/embedding.cuh) at B T = 512 (the default model's microbatch),
// 8,192 and 65,536 positions, with the commonest of 256 tokens on 20% of the positions
// (a space is about 18% of the default corpus's bytes) and the rest uniform. CPU time of
// the whole process, the least of `repeats` runs (default 3; the first run also pays the
// runtime's start-up), so that on a shared machine the figure counts our work only.
// Usage: build/cpu/tools/embedding_bench [repeats] (make bench).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/embedding.cuh"

namespace {

double process_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

template <typename T>
T* device_copy(const std::vector<T>& host) {
  T* device = nullptr;
  CUDA_CHECK(cudaMalloc(&device, host.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(device, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return device;
}

// The least CPU time of one backward over `repeats` runs, in seconds.
double backward_seconds(int B, int T, int C, int repeats) {
  const int Vp = 256, n = B * T;
  std::mt19937_64 rng(1);
  std::uniform_int_distribution<int> other(1, Vp - 1);
  std::vector<int> tokens(n);
  for (int p = 0; p < n; ++p) tokens[p] = p < n / 5 ? 0 : other(rng);
  std::shuffle(tokens.begin(), tokens.end(), rng);
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::vector<float> dout(size_t(n) * C);
  for (float& x : dout) x = value(rng);
  int* d_tokens = device_copy(tokens);
  float* d_dout = device_copy(dout);
  float* dwte = device_copy(std::vector<float>(size_t(Vp) * C));
  float* dwpe = device_copy(std::vector<float>(size_t(T) * C));
  int* workspace = device_copy(std::vector<int>(embedding_backward_workspace_size(B, T, C)));
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double start = process_seconds();
    embedding_backward(dwte, dwpe, workspace, d_dout, d_tokens, B, T, C, nullptr);
    CUDA_CHECK(cudaDeviceSynchronize());
    best = std::min(best, process_seconds() - start);
  }
  for (void* p : {(void*)d_tokens, (void*)d_dout, (void*)dwte, (void*)dwpe, (void*)workspace}) cudaFree(p);
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  const int repeats = argc > 1 ? std::atoi(argv[1]) : 3;
  if (repeats < 1) {
    std::fprintf(stderr, "usage: embedding_bench [repeats >= 1]\n");
    return 2;
  }
  struct Case {
    int B, T, C;
  };
  for (const Case c : {Case{8, 64, 128}, Case{8, 1024, 128}, Case{8, 1024, 768}, Case{64, 1024, 128}})
    std::printf("embedding backward, B T = %d (B %d, T %d), C = %d: %.2f ms CPU\n", c.B * c.T, c.B, c.T, c.C,
                1e3 * backward_seconds(c.B, c.T, c.C, repeats));
  return 0;
}
