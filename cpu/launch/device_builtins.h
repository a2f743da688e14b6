// The device side of CUDA for the CPU build: what nvcc provides to kernel code
// (threadIdx & co., __shared__, __syncthreads, warp shuffles and votes, atomics,
// device-only math intrinsics), defined so that g++ compiles and runs the same
// kernels. Included at the end of cpu/include/cuda_runtime.h and cuda_bf16.h.
//
// Each CUDA thread of a block is a fiber (cpu/launch/block_scheduler.cpp); all fibers of a
// block run on one OS thread, so thread_local state is per block in flight.
#pragma once
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

// Under g++, NVIDIA's host_defines.h turns these into nothing; a __shared__ array
// would silently become per-thread. Shared memory is one copy per OS thread, which
// is one copy per block in flight.
#undef __shared__
#define __shared__ static thread_local
#undef __device__
#define __device__
#undef __global__
#define __global__
#undef __host__
#define __host__
#undef __constant__
#define __constant__
#undef __launch_bounds__
#define __launch_bounds__(...)

inline thread_local uint3 threadIdx;
inline thread_local uint3 blockIdx;
inline thread_local dim3 blockDim;
inline thread_local dim3 gridDim;
#ifndef warpSize
inline constexpr int warpSize = 32;
#endif

// ---- block and warp synchronisation (cpu/launch/block_scheduler.cpp, cpu/launch/warp_collectives.cpp) ----
// Each takes its call site by default arguments, which the compiler fills in at the call
// (synccheck: threads of a block meeting at different barriers are an error naming both sites).
#define CPU_CALL_SITE const char *file = __builtin_FILE(), unsigned line = __builtin_LINE()
void __syncthreads(CPU_CALL_SITE);
int __syncthreads_count(int predicate, CPU_CALL_SITE);
int __syncthreads_and(int predicate, CPU_CALL_SITE);
int __syncthreads_or(int predicate, CPU_CALL_SITE);
void __syncwarp(unsigned mask = 0xffffffffu, CPU_CALL_SITE);
unsigned __ballot_sync(unsigned mask, int predicate, CPU_CALL_SITE);
int __any_sync(unsigned mask, int predicate, CPU_CALL_SITE);
int __all_sync(unsigned mask, int predicate, CPU_CALL_SITE);
unsigned __activemask();
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }
inline void __threadfence_block() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

namespace cpu {
// Where a kernel calls a barrier or a warp collective.
struct CallSite {
  const char* file = nullptr;
  unsigned line = 0;
};

enum class Shuffle { index, up, down, exclusive_or };
// Exchanges 8 bytes among the lanes of `mask`; returns the bytes of the lane that
// `kind`/`operand`/`width` select for the caller, as the CUDA shuffles define it.
uint64_t warp_shuffle(Shuffle kind, unsigned mask, uint64_t bits, int operand, int width, CallSite site);

template <typename T>
T shuffle(Shuffle kind, unsigned mask, T var, int operand, int width, CallSite site) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of an 8-byte-or-smaller value");
  uint64_t bits = 0;
  std::memcpy(&bits, &var, sizeof(T));
  bits = warp_shuffle(kind, mask, bits, operand, width, site);
  T out;
  std::memcpy(&out, &bits, sizeof(T));
  return out;
}

// One lane's part in a reduction over its whole warp (cooperative_groups::reduce):
// once all 32 lanes have arrived, tree(op, values, result) runs once, with the 32
// lanes' value pointers in lane order and the lowest lane's op and result, and
// the result's bytes are copied to every lane's result.
struct WarpReduction {
  const void* value;
  void* result;
  size_t bytes;
  const void* op;
  void (*tree)(const void* op, const void* const* values, void* result);
};
void warp_reduce(const WarpReduction& reduction, CallSite site);

// The block's dynamic shared memory (launch's shared_bytes); see DYNAMIC_SHARED.
extern thread_local unsigned char* dynamic_shared_memory;
}  // namespace cpu

template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize, CPU_CALL_SITE) {
  return cpu::shuffle(cpu::Shuffle::index, mask, var, src_lane, width, {file, line});
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize, CPU_CALL_SITE) {
  return cpu::shuffle(cpu::Shuffle::up, mask, var, int(delta), width, {file, line});
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize, CPU_CALL_SITE) {
  return cpu::shuffle(cpu::Shuffle::down, mask, var, int(delta), width, {file, line});
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize, CPU_CALL_SITE) {
  return cpu::shuffle(cpu::Shuffle::exclusive_or, mask, var, lane_mask, width, {file, line});
}

// ---- atomics: the overloads CUDA has, real atomics so that blocks may run on
// several OS threads at once. Under `make racecheck` they are relaxed, as CUDA's are ("atomic
// functions do not act as memory fences"), so that ThreadSanitizer sees no order through them
// that a GPU does not give; elsewhere sequentially consistent. ----
#ifdef CPU_RACECHECK
#define CPU_ATOMIC_ORDER __ATOMIC_RELAXED
#else
#define CPU_ATOMIC_ORDER __ATOMIC_SEQ_CST
#endif
namespace cpu {
template <typename T, typename F>
T atomic_update(T* address, F update) {
  T old = __atomic_load_n(address, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(address, &old, update(old), true, CPU_ATOMIC_ORDER, __ATOMIC_RELAXED)) {
  }
  return old;
}
template <typename T, typename F>
T atomic_update_float(T* address, F update) {  // CAS on the bit pattern
  using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
  Bits* bits = reinterpret_cast<Bits*>(address);
  Bits old = __atomic_load_n(bits, __ATOMIC_RELAXED), next;
  T old_value;
  do {
    std::memcpy(&old_value, &old, sizeof(T));
    T new_value = update(old_value);
    std::memcpy(&next, &new_value, sizeof(T));
  } while (!__atomic_compare_exchange_n(bits, &old, next, true, CPU_ATOMIC_ORDER, __ATOMIC_RELAXED));
  return old_value;
}
}  // namespace cpu

inline int atomicAdd(int* a, int v) { return __atomic_fetch_add(a, v, CPU_ATOMIC_ORDER); }
inline unsigned atomicAdd(unsigned* a, unsigned v) { return __atomic_fetch_add(a, v, CPU_ATOMIC_ORDER); }
inline unsigned long long atomicAdd(unsigned long long* a, unsigned long long v) {
  return __atomic_fetch_add(a, v, CPU_ATOMIC_ORDER);
}
inline float atomicAdd(float* a, float v) {
  return cpu::atomic_update_float(a, [v](float x) { return x + v; });
}
inline double atomicAdd(double* a, double v) {
  return cpu::atomic_update_float(a, [v](double x) { return x + v; });
}
inline int atomicSub(int* a, int v) { return __atomic_fetch_sub(a, v, CPU_ATOMIC_ORDER); }
inline unsigned atomicSub(unsigned* a, unsigned v) { return __atomic_fetch_sub(a, v, CPU_ATOMIC_ORDER); }
template <typename T>
T atomicMax(T* a, T v) {
  static_assert(std::is_integral_v<T>, "CUDA has atomicMax only for integer types");
  return cpu::atomic_update(a, [v](T x) { return x > v ? x : v; });
}
template <typename T>
T atomicMin(T* a, T v) {
  static_assert(std::is_integral_v<T>, "CUDA has atomicMin only for integer types");
  return cpu::atomic_update(a, [v](T x) { return x < v ? x : v; });
}
template <typename T>
T atomicCAS(T* a, T compare, T v) {
  static_assert(std::is_integral_v<T>, "CUDA has atomicCAS only for integer types");
  __atomic_compare_exchange_n(a, &compare, v, false, CPU_ATOMIC_ORDER, CPU_ATOMIC_ORDER);
  return compare;
}
inline int atomicExch(int* a, int v) { return __atomic_exchange_n(a, v, CPU_ATOMIC_ORDER); }
inline unsigned atomicExch(unsigned* a, unsigned v) { return __atomic_exchange_n(a, v, CPU_ATOMIC_ORDER); }
inline unsigned long long atomicExch(unsigned long long* a, unsigned long long v) {
  return __atomic_exchange_n(a, v, CPU_ATOMIC_ORDER);
}
inline float atomicExch(float* a, float v) {
  return cpu::atomic_update_float(a, [v](float) { return v; });
}

// ---- device-only intrinsics (declared by NVIDIA's headers for nvcc only) ----
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __powf(float x, float y) { return std::pow(x, y); }
inline float __sinf(float x) { return std::sin(x); }
inline float __cosf(float x) { return std::cos(x); }
inline float __tanf(float x) { return std::tan(x); }
inline float __fdividef(float x, float y) { return x / y; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
template <typename T>
T __ldg(const T* p) { return *p; }
inline int __float_as_int(float x) { int i; std::memcpy(&i, &x, 4); return i; }
inline float __int_as_float(int i) { float x; std::memcpy(&x, &i, 4); return x; }
inline unsigned __float_as_uint(float x) { unsigned i; std::memcpy(&i, &x, 4); return i; }
inline float __uint_as_float(unsigned i) { float x; std::memcpy(&x, &i, 4); return x; }
inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline unsigned __brev(unsigned x) {
  unsigned r = 0;
  for (int i = 0; i < 32; ++i) r |= ((x >> i) & 1u) << (31 - i);
  return r;
}
