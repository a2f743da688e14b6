// Stochastic rounding of fp32 values to bf16 (the bf16 parameters' update, kernels/adamw.cuh),
// with random bits that depend only on a key and the element's index: no generator state, no
// thread or block numbers. The same value of the same element under the same key rounds to the
// same bf16 wherever the element is computed and however its tensor is cut into calls. The
// trainer's key is (seed, step) and the index the element's place in the whole model's llm.c
// layout, so every pipeline layout rounds every parameter alike (trainer/step/optimizer.h).
#pragma once
#include <cuda_bf16.h>

#include <cstdint>
#include <cstring>

// splitmix64's output function (Steele, Lea and Flood, 2014): a bijection of 64-bit words that
// turns consecutive inputs into unrelated outputs.
__host__ __device__ inline uint64_t mix64(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr uint64_t kGoldenGamma = 0x9e3779b97f4a7c15ull;  // splitmix64's increment

// The key of optimizer step t of a run seeded with seed.
__host__ __device__ inline uint64_t rounding_key(uint64_t seed, uint64_t step) {
  return mix64(seed ^ mix64(step * kGoldenGamma));
}

// 16 random bits for element index under key: output index + 1 of splitmix64's generator
// started from key (its outputs are mix64 of the state key + k gamma), the high bits.
__host__ __device__ inline uint32_t rounding_bits(uint64_t key, uint64_t index) {
  return uint32_t(mix64(key + (index + 1) * kGoldenGamma) >> 48);
}

// x rounded to one of the two bf16 values around it: away from zero with probability (the 16
// bits of x's magnitude that bf16 drops) / 2^16, else towards zero, so that on average the
// result is x (small updates are not lost on average, as they are by round to nearest).
// bits (16 random bits) decide: adding them to the dropped bits carries into bf16's last bit
// with exactly that probability. A bf16 value stays itself, infinities stay, NaN stays NaN.
__host__ __device__ inline __nv_bfloat16 round_stochastically(float x, uint32_t bits) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof(u));
  __nv_bfloat16_raw raw;
  raw.x = (u & 0x7fffffffu) > 0x7f800000u ? uint16_t((u >> 16) | 0x40u) : uint16_t((u + (bits & 0xffffu)) >> 16);
  return __nv_bfloat16(raw);
}
