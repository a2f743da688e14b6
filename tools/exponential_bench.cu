// The CPU build's expf (cpu/include/kernels/exponential.cuh) against the machine's libm (a program,
// not a test): whether the two agree on every one of the 2^32 floats (NaN with NaN), and the ns an
// element of each over 2^20 arguments in [-10, 10]: libm's expf called in a loop, the written-out
// copy in the same loop (which g++ vectorises), best of 20. tests/cpu/exponential_test.cu checks a
// sample on every run. Usage: build/cpu/tools/exponential_bench (make bench); about a minute.
#include <time.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <vector>

#include "kernels/exponential.cuh"

namespace {

double cpu_seconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// y = exp(x), in chunks of 16 as cpu/include/kernels/elementwise.cuh's loop (a count g++ -O2
// vectorises).
template <typename Exp>
[[gnu::noinline]] void apply(const float* __restrict x, float* __restrict y, size_t n, Exp exp) {
  for (size_t i = 0; i < n; i += 16)
    for (size_t k = 0; k < 16; ++k) y[i + k] = exp(x[i + k]);
}

template <typename Exp>
double ns_per_element(const std::vector<float>& x, std::vector<float>& y, Exp exp) {
  double best = 1e30;
  for (int round = 0; round < 20; ++round) {
    const double start = cpu_seconds();
    apply(x.data(), y.data(), x.size(), exp);
    best = std::min(best, cpu_seconds() - start);
  }
  return best / double(x.size()) * 1e9;
}

}  // namespace

int main() {
  uint64_t differ = 0;
  std::vector<float> x(1 << 16), ours(x.size()), libm(x.size());
  for (uint64_t base = 0; base < (uint64_t(1) << 32); base += x.size()) {
    for (size_t i = 0; i < x.size(); ++i) {
      const uint32_t bits = uint32_t(base + i);
      std::memcpy(&x[i], &bits, sizeof bits);
    }
    for (size_t i = 0; i < x.size(); ++i) ours[i] = exponential(x[i]);
    for (size_t i = 0; i < x.size(); ++i) libm[i] = expf(x[i]);
    for (size_t i = 0; i < x.size(); ++i) {
      if (std::memcmp(&ours[i], &libm[i], sizeof(float)) == 0 || (std::isnan(ours[i]) && std::isnan(libm[i]))) continue;
      if (differ++ < 10) std::printf("differ at %a: ours %a, libm %a\n", x[i], ours[i], libm[i]);
    }
  }
  std::printf("every float: %llu of 2^32 differ from this machine's libm\n", (unsigned long long)differ);

  std::vector<float> args(1 << 20), out(args.size());
  for (size_t i = 0; i < args.size(); ++i) args[i] = -10.0f + 20.0f * float(i) / float(args.size());
  const double libm_ns = ns_per_element(args, out, [](float v) { return expf(v); });
  const double ours_ns = ns_per_element(args, out, [](float v) { return exponential(v); });
  std::printf("ns an element over 2^20 arguments: libm's expf %.2f, the written-out copy in a loop %.2f (%.1fx)\n",
              libm_ns, ours_ns, libm_ns / ours_ns);
  return 0;
}
