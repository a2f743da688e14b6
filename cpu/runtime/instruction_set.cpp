// The CPU build is compiled for the instruction set the Makefile's CPU_ARCH names (AVX2 and FMA by
// default). On a CPU without it, the first such instruction would end the program with SIGILL and
// no word of why; this runs before every other initialiser of the program (priority 101) and names
// what is missing. It is compiled for plain x86-64, so that it can itself run anywhere.
#include <cstdio>
#include <cstdlib>

namespace {

[[gnu::constructor(101), gnu::target("no-avx,no-avx2,no-fma")]] void check_instruction_set() {
  __builtin_cpu_init();
  const char* missing = nullptr;
#ifdef __AVX2__
  if (!__builtin_cpu_supports("avx2")) missing = "AVX2";
#endif
#ifdef __FMA__
  if (!missing && !__builtin_cpu_supports("fma")) missing = "FMA";
#endif
  if (!missing) return;
  std::fprintf(stderr,
               "cpu: this CPU build uses %s, which this CPU does not have; rebuild it for any x86-64 with "
               "`make clean && make CPU_ARCH=` (the same results, slower)\n",
               missing);
  std::_Exit(EXIT_FAILURE);
}

}  // namespace
