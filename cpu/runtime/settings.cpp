// Reads the CPU build's settings (cpu/runtime/settings.h) from the environment once.
#include "cpu/runtime/settings.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace cpu {
namespace {

long long read_number(const char* name, long long fallback, long long least) {
  const char* text = std::getenv(name);
  if (!text || !*text) return fallback;
  char* end = nullptr;
  long long value = std::strtoll(text, &end, 10);
  if (*end || value < least) {
    std::fprintf(stderr, "cpu: %s=%s is not a whole number >= %lld\n", name, text, least);
    std::exit(EXIT_FAILURE);
  }
  return value;
}

// The ranks of this job on this node, from the launcher's environment (MPI is not yet
// initialised when the settings are read): MPICH's Hydra sets MPI_LOCALNRANKS, Open MPI
// OMPI_COMM_WORLD_LOCAL_SIZE. Without a launcher, 1.
long long node_local_ranks() {
  for (const char* name : {"MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE"})
    if (const char* text = std::getenv(name); text && *text) return std::max(1LL, std::atoll(text));
  return 1;
}

// The cores this process may run on (its affinity mask, which taskset and launchers narrow),
// shared evenly by the ranks of the node: each rank's default block threads.
long long cores_per_rank() {
  cpu_set_t set;
  const long long cores = sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
  return std::max(1LL, cores / node_local_ranks());
}

Settings read_settings() {
  Settings s;
  if (const char* order = std::getenv("CUDA_CPU_THREAD_ORDER"); order && *order) {
    if (!std::strcmp(order, "natural")) s.thread_order = ThreadOrder::natural;
    else if (!std::strcmp(order, "reverse")) s.thread_order = ThreadOrder::reverse;
    else if (!std::strcmp(order, "shuffle")) s.thread_order = ThreadOrder::shuffle;
    else {
      std::fprintf(stderr, "cpu: CUDA_CPU_THREAD_ORDER=%s: expected natural, reverse or shuffle\n", order);
      std::exit(EXIT_FAILURE);
    }
  }
  s.seed = uint64_t(read_number("CUDA_CPU_SEED", 1, 0));
  // A reversed or shuffled order is a reproducible order of blocks too, which needs one OS thread.
  const long long cores = cores_per_rank();
  s.block_threads = int(read_number("CUDA_CPU_BLOCK_THREADS", s.thread_order == ThreadOrder::natural ? cores : 1, 1));
  s.stack_bytes = size_t(read_number("CUDA_CPU_STACK_KB", 64, 16)) << 10;
  s.blas_threads = int(read_number("CUDA_CPU_BLAS_THREADS", cores, 1));
  const char* core = std::getenv("CUDA_CPU_BLAS_CORE");
  s.blas_core = core && *core ? core
                : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? "Haswell"
                                                                                  : "auto";
  const long long ram = (long long)sysconf(_SC_PHYS_PAGES) * sysconf(_SC_PAGE_SIZE);
  s.device_bytes = size_t(read_number("CUDA_CPU_DEVICE_MB", ram >> 20, 1)) << 20;
  s.devices = int(read_number("CUDA_CPU_DEVICES", 8, 1));
  if (const char* visible = std::getenv("CUDA_VISIBLE_DEVICES")) s.visible_devices = visible;
  s.devices_per_process = int(read_number("CUDA_CPU_DEVICES_PER_PROCESS", 1, 1));
  s.strict_memory = read_number("CUDA_CPU_STRICT_MEMORY", 0, 0) != 0;
  s.stream_delay_us = int(read_number("CUDA_CPU_STREAM_DELAY_US", 0, 0));
  s.nccl_check = read_number("CUDA_CPU_NCCL_CHECK", 0, 0) != 0;
  s.nccl_serial = read_number("CUDA_CPU_NCCL_SERIAL", 0, 0) != 0;
  s.nccl_latency_us = int(read_number("CUDA_CPU_NCCL_LATENCY_US", 0, 0));
  return s;
}

}  // namespace

Settings& settings() {
  static Settings s = read_settings();
  return s;
}

}  // namespace cpu
