// The layout tests' data (and the PipeDream reference's): 4096 tokens of a 64-token vocabulary
// drawn with seed 7, built once.
#pragma once
#include <cstdint>
#include <random>

#include "trainer/data/data.h"

inline const TokenDataset& random_tokens() {
  static const TokenDataset data = [] {
    TokenDataset d;
    std::mt19937_64 generator(7);
    for (int i = 0; i < 4096; ++i) d.tokens.push_back(uint16_t(generator() % 64));
    d.vocab_size = 64;
    d.source = "random tokens";
    return d;
  }();
  return data;
}
