// Settings of the CPU build, read once from the environment; tests may change them.
//   CUDA_CPU_THREAD_ORDER  natural | reverse | shuffle: the order in which a block's
//                          threads (and a grid's blocks) run between synchronisation
//                          points. reverse and shuffle expose a missing __syncthreads;
//                          they also poison dynamic shared memory (NaN bytes) per block.
//   CUDA_CPU_SEED          seed of the shuffled order (default 1); each launch derives its own.
//   CUDA_CPU_BLOCK_THREADS OS threads that run blocks of one launch at once (default: the cores
//                          per rank: the cores of the process's affinity mask divided by the
//                          ranks on the node (the launcher's MPI_LOCALNRANKS or
//                          OMPI_COMM_WORLD_LOCAL_SIZE), at least 1; 1 in the reverse and shuffle
//                          orders, whose order of blocks is reproducible). Results do not depend on it.
//   CUDA_CPU_STACK_KB      stack of each fiber (default 64).
//   CUDA_CPU_BLAS_THREADS  OS threads that share one GEMM (default: the cores per rank, as block
//                          threads). A GEMM is cut into the same column panels whatever their
//                          number, each panel one single-threaded OpenBLAS call, so results do not
//                          depend on it.
//   CUDA_CPU_BLAS_CORE     OpenBLAS's kernel set (its OPENBLAS_CORETYPE name): a GEMM's bits depend
//                          on it, and OpenBLAS's own choice depends on how well it knows the CPU
//                          (docs/cpu-build.md, "GEMMs"). Default Haswell, on every CPU with AVX2
//                          and FMA (else OpenBLAS's choice); "auto" is OpenBLAS's choice anywhere.
//   CUDA_CPU_DEVICE_MB     the memory each device reports (default: the machine's RAM).
//   CUDA_CPU_DEVICES       devices per node, as a GPU node has (default 8): each MPI rank of a node
//                          must select its own (cudaSetDevice), as on a GPU machine.
//   CUDA_VISIBLE_DEVICES   which of the node's devices the process sees, read as CUDA reads it
//                          (cpu/runtime/devices.h): "2,0" shows physical devices 2 and 0 as devices 0 and 1.
//   CUDA_CPU_DEVICES_PER_PROCESS  devices a process may use (default 1): a call that needs the
//                          calling thread's device on another aborts naming both (cpu/runtime/devices.h).
//                          For tests that use several devices in one process.
//   CUDA_CPU_STRICT_MEMORY 1: device memory is unreadable by host code (memory protection keys);
//                          a host access, or a kernel's access to another device's memory, is
//                          reported naming the allocation, and the process aborts.
//   CUDA_CPU_STREAM_DELAY_US  each operation queued on a stream waits this long before it runs
//                          (default 0), so that a missing synchronisation reads unfinished results.
//   CUDA_CPU_NCCL_CHECK    1: every NCCL call is checked against its partners' calls before it
//                          exchanges data (cpu/nccl/nccl_call_matching.h): a mismatched count, type, reduction,
//                          root or operation fails the communicator naming both ranks' calls,
//                          instead of hanging or exchanging garbage. For communicators made with it on.
//   CUDA_CPU_NCCL_SERIAL   1: a device runs one NCCL operation at a time, in the order they start
//                          (cpu/nccl/nccl_device.h), as a GPU may: ranks that start operations of two
//                          communicators in different orders deadlock, as they may on a GPU.
//   CUDA_CPU_NCCL_LATENCY_US  each NCCL operation (a call, or a group as one) completes this long
//                          after its data has arrived (default 0): a network's latency, on the
//                          operation's stream, whose worker sleeps (no core held).
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace cpu {

enum class ThreadOrder { natural, reverse, shuffle };

struct Settings {
  ThreadOrder thread_order = ThreadOrder::natural;
  uint64_t seed = 1;
  int block_threads = 1;
  size_t stack_bytes = 64 << 10;
  int blas_threads = 1;
  std::string blas_core;  // "auto": OpenBLAS's choice
  size_t device_bytes = 0;
  int devices = 8;
  std::optional<std::string> visible_devices;  // CUDA_VISIBLE_DEVICES; nullopt: unset, every device
  int devices_per_process = 1;
  bool strict_memory = false;
  int stream_delay_us = 0;
  bool nccl_check = false;
  bool nccl_serial = false;
  int nccl_latency_us = 0;
};

// The process's settings, read from the environment on first use.
Settings& settings();

}  // namespace cpu
