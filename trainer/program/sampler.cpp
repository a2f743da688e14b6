// Sampling text from the model (trainer/program/sampler.h).
#include "trainer/program/sampler.h"

#include <algorithm>
#include <cmath>

uint64_t sampler_seed_state(uint64_t seed) {
  // splitmix64 of the seed, so that nearby seeds give unrelated streams and the state is never 0.
  uint64_t z = seed + 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return z == 0 ? 1 : z;
}

uint32_t random_u32(uint64_t& state) {
  state ^= state >> 12;
  state ^= state << 25;
  state ^= state >> 27;
  return uint32_t((state * 0x2545F4914F6CDD1Dull) >> 32);
}

float random_unit_float(uint64_t& state) { return float(random_u32(state) >> 8) / 16777216.0f; }

int sample_from_logits(const std::vector<float>& logits, float coin, double temperature) {
  const double max_logit = *std::max_element(logits.begin(), logits.end());
  const auto weight = [&](float logit) { return std::exp((double(logit) - max_logit) / temperature); };
  double total = 0;
  for (float logit : logits) total += weight(logit);
  const double threshold = double(coin) * total;
  double cumulative = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    cumulative += weight(logits[i]);
    if (threshold < cumulative) return int(i);
  }
  return int(logits.size()) - 1;
}

int sample_start_token(TokenFormat format, const Tokenizer& tokenizer, int vocab_size) {
  if (format == TokenFormat::text_bytes) return '\n';
  return tokenizer.eot_token >= 0 ? tokenizer.eot_token : vocab_size - 1;
}

template <typename Element>
std::vector<int> generate_tokens(Trainer<Element>& trainer, int start, int length, double temperature,
                                 uint64_t& rng_state) {
  std::vector<int> tokens = {start};
  for (int i = 0; i < length; ++i) {
    const int count = std::min<int>(int(tokens.size()), trainer.T);
    const std::vector<float>& logits = next_token_logits(trainer, tokens.data() + tokens.size() - count, count);
    tokens.push_back(sample_from_logits(logits, random_unit_float(rng_state), temperature));
  }
  return tokens;
}

template std::vector<int> generate_tokens<float>(Trainer<float>&, int, int, double, uint64_t&);
template std::vector<int> generate_tokens<__nv_bfloat16>(Trainer<__nv_bfloat16>&, int, int, double, uint64_t&);
