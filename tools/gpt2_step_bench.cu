// Benchmark (a program, not a test): one training step of a GPT-2 124M-shaped model (llm.c's
// L = 12, NH = 12, C = 768, V = 50257, here T = 1024, B = 1) on one process with the settings in
// force (by default: cpu/runtime/settings.h), against OpenBLAS's sgemm on the model's own GEMM shapes in
// the same run. Prints the model's FLOP/s (its counted FLOPs over the step's time), the sgemm rate
// over those shapes on the process's BLAS threads and on every core it has (the machine's limit),
// the model's rate as a share of each, and whether the GEMMs give the same bits on one OpenBLAS
// thread as on every core (they do not, which is why OpenBLAS stays on one: docs/cpu-build.md).
// Usage: build/cpu/tools/gpt2_step_bench [STEPS] (make bench); the best of STEPS timed steps (default 2)
// after one warm-up step.
#include <sched.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cpu/blas/blas_library.h"
#include "cpu/runtime/settings.h"
#include "model/config.h"
#include "model/parameters.h"
#include "trainer/data/data.h"
#include "trainer/step/trainer.h"

namespace {

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// One GEMM of the step in row-major terms: C (M, N) = op(A) (M, K) op(B) (K, N), `count` times.
struct Gemm {
  const char* what;
  bool transpose_a, transpose_b;
  int M, N, K;
  int count;
  double flops() const { return 2.0 * M * N * K * count; }
};

// Every GEMM of one step (forward, input and weight gradients), as llm.c's model computes them:
// a linear layer out = inp W^T (BT, OC), dinp = dout W, dW += dout^T inp; attention per head
// (B NH of them per layer) scores = Q K^T and out = att V over the full T x T, and their gradients.
std::vector<Gemm> step_gemms(const GPTConfig& c, int B, int T) {
  const int BT = B * T, C = c.channels, L = c.num_layers, hs = C / c.num_heads, heads = B * c.num_heads;
  std::vector<Gemm> gemms;
  auto linear = [&](const char* what, int OC, int IC, int count) {
    gemms.push_back({what, false, true, BT, OC, IC, count});   // forward
    gemms.push_back({what, false, false, BT, IC, OC, count});  // input gradient
    gemms.push_back({what, true, false, OC, IC, BT, count});   // weight gradient
  };
  linear("qkv", 3 * C, C, L);
  linear("attproj", C, C, L);
  linear("fc", 4 * C, C, L);
  linear("fcproj", C, 4 * C, L);
  linear("classifier", c.padded_vocab_size, C, 1);
  gemms.push_back({"att scores", false, true, T, T, hs, heads * L});
  gemms.push_back({"att out", false, false, T, hs, T, heads * L});
  gemms.push_back({"att d scores", false, true, T, T, hs, heads * L});
  gemms.push_back({"att dV", true, false, T, hs, T, heads * L});
  gemms.push_back({"att dQ", false, false, T, hs, T, heads * L});
  gemms.push_back({"att dK", true, false, T, hs, T, heads * L});
  return gemms;
}

std::vector<float> filled(size_t n, uint32_t seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    seed = seed * 1664525u + 1013904223u;
    v[i] = float(int(seed >> 8) % 2001 - 1000) * 3.5e-5f;  // uniform in about +-0.035 (sd 0.02)
  }
  return v;
}

// Runs one of each shape once and returns the results, for the bitwise comparison.
std::vector<std::vector<float>> run_each_once(const std::vector<Gemm>& gemms) {
  std::vector<std::vector<float>> results;
  for (const Gemm& g : gemms) {
    const std::vector<float> a = filled(size_t(g.M) * g.K, 1), b = filled(size_t(g.K) * g.N, 2);
    std::vector<float> c(size_t(g.M) * g.N);
    cpu::blas_library().sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
                g.M, g.N, g.K, 1.0f, a.data(), g.transpose_a ? g.M : g.K, b.data(), g.transpose_b ? g.K : g.N, 0.0f,
                c.data(), g.N);
    results.push_back(std::move(c));
  }
  return results;
}

// Seconds for all of the step's GEMMs (each shape timed on `count` repetitions).
double sgemm_seconds(const std::vector<Gemm>& gemms) {
  double total = 0;
  for (const Gemm& g : gemms) {
    const std::vector<float> a = filled(size_t(g.M) * g.K, 1), b = filled(size_t(g.K) * g.N, 2);
    std::vector<float> c(size_t(g.M) * g.N);
    auto once = [&] {
      cpu::blas_library().sgemm(CblasRowMajor, g.transpose_a ? CblasTrans : CblasNoTrans, g.transpose_b ? CblasTrans : CblasNoTrans,
                  g.M, g.N, g.K, 1.0f, a.data(), g.transpose_a ? g.M : g.K, b.data(), g.transpose_b ? g.K : g.N, 1.0f,
                  c.data(), g.N);
    };
    once();  // warm
    const int reps = std::min(g.count, 24);  // a sample of the repeated per-head GEMMs
    const auto start = Clock::now();
    for (int r = 0; r < reps; ++r) once();
    total += seconds_since(start) / reps * g.count;
  }
  return total;
}

int run(int steps) {
  const GPTConfig config = make_gpt_config(12, 12, 768, 1024, 50257);
  const int B = 1, T = 1024;
  const cpu::Settings& s = cpu::settings();
  std::printf("GPT-2 124M-shaped step: L=12 NH=12 C=768 V=50257 T=%d B=%d; %d BLAS threads, %d block threads, "
              "OpenBLAS's %s kernels\n", T, B, s.blas_threads, s.block_threads, cpu::blas_library().core.c_str());

  Trainer<float> trainer = create_trainer<float>(config, B, T, 1);
  std::vector<float> parameters = filled(num_parameters(config), 3);
  const auto sizes = parameter_tensor_sizes(config);
  const auto offsets = parameter_tensor_offsets(config);
  for (int t : {kLn1w, kLn2w, kLnfw}) std::fill_n(parameters.begin() + offsets[t], sizes[t], 1.0f);
  upload_parameters(trainer, parameters);
  TokenDataset data;
  data.vocab_size = config.vocab_size;
  data.source = "generated";
  for (int i = 0; i < 4 * (B * T + 1); ++i) data.tokens.push_back(uint16_t((i * 7919u) % 50257u));
  BatchReader reader = make_batch_reader(data, B, T, false, 0);
  const AdamWSettings adamw{0.9, 0.95, 1e-8, 0.0, 1.0};

  train_step(trainer, reader, adamw, 1e-4, 1);  // warm-up: first touches, slots
  double step = 1e30;
  for (int t = 2; t < 2 + steps; ++t) {
    const auto start = Clock::now();
    const StepResult result = train_step(trainer, reader, adamw, 1e-4, t);
    step = std::min(step, seconds_since(start));
    std::printf("step %d: loss %.6f, %.2f s\n", t, result.loss, seconds_since(start));
  }
  destroy_trainer(trainer);

  const std::vector<Gemm> gemms = step_gemms(config, B, T);
  double flops = 0;
  for (const Gemm& g : gemms) flops += g.flops();
  cpu_set_t set;
  const int cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  cpu::blas_library().set_num_threads(1);
  const double gemm_time = sgemm_seconds(gemms);
  cpu::blas_library().set_num_threads(cores);
  const double machine_gemm_time = sgemm_seconds(gemms);
  const auto every_core = run_each_once(gemms);
  cpu::blas_library().set_num_threads(1);
  const bool same_bits = run_each_once(gemms) == every_core;

  std::printf("model FLOPs per step (its GEMMs, attention over the full T x T): %.3f TFLOP\n", flops * 1e-12);
  std::printf("step: %.2f s, %.1f GFLOP/s\n", step, flops / step * 1e-9);
  std::printf("OpenBLAS sgemm on the step's shapes, 1 thread: %.2f s, %.1f GFLOP/s; the model at %.0f%% of it\n",
              gemm_time, flops / gemm_time * 1e-9, 100.0 * gemm_time / step);
  std::printf("OpenBLAS sgemm on the step's shapes, %d thread(s) (every core): %.2f s, %.1f GFLOP/s; the model at %.0f%% of it\n",
              cores, machine_gemm_time, flops / machine_gemm_time * 1e-9, 100.0 * machine_gemm_time / step);
  std::printf("sgemm results on 1 and %d threads bitwise equal: %s\n", cores, same_bits ? "yes" : "no");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 2;
  if (steps < 1) {
    std::fprintf(stderr, "gpt2_step_bench: STEPS must be a whole number >= 1, not %s\n", argv[1]);
    return 2;
  }
  return run(steps);
}
