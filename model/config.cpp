// Builds and validates GPTConfig (model/config.h).
#include "model/config.h"

#include <climits>
#include <cstdio>
#include <stdexcept>
#include <string>

namespace {

constexpr int kVocabPadding = 128;
constexpr long double kMostParameters = 576460752303423488.0L;  // 2^59

void require_positive(const char* field, int value) {
  if (value <= 0) throw std::runtime_error(std::string(field) + " " + std::to_string(value) + " is not positive");
}

}  // namespace

void validate_gpt_config(const GPTConfig& config) {
  require_positive("max_seq_len", config.max_seq_len);
  require_positive("vocab_size", config.vocab_size);
  require_positive("padded_vocab_size", config.padded_vocab_size);
  require_positive("num_layers", config.num_layers);
  require_positive("num_heads", config.num_heads);
  require_positive("channels", config.channels);
  if (config.channels % config.num_heads != 0)
    throw std::runtime_error("channels " + std::to_string(config.channels) + " is not divisible by num_heads " +
                             std::to_string(config.num_heads));
  if (config.padded_vocab_size < config.vocab_size)
    throw std::runtime_error("padded_vocab_size " + std::to_string(config.padded_vocab_size) +
                             " is smaller than vocab_size " + std::to_string(config.vocab_size));
  const long double parameters = unwrapped_parameter_count(config);
  if (parameters >= kMostParameters) {
    char count[32];
    std::snprintf(count, sizeof(count), "%.3Lg", parameters);
    throw std::runtime_error(std::string("parameter count ") + count +
                             " is 2^59 or more (16 bytes each with gradients and moments)");
  }
}

long double unwrapped_parameter_count(const GPTConfig& c) {
  const long double C = c.channels, L = c.num_layers;
  return (static_cast<long double>(c.padded_vocab_size) + c.max_seq_len) * C + L * (12 * C * C + 13 * C) + 2 * C;
}

GPTConfig make_gpt_config(int layers, int heads, int channels, int max_seq_len, int vocab_size) {
  GPTConfig config{max_seq_len, vocab_size, 0, layers, heads, channels};
  try {
    require_positive("vocab_size", vocab_size);
    if (vocab_size > INT_MAX - (kVocabPadding - 1))
      throw std::runtime_error("vocab_size " + std::to_string(vocab_size) + " is too large to pad to a multiple of " +
                               std::to_string(kVocabPadding));
    config.padded_vocab_size = (vocab_size + kVocabPadding - 1) / kVocabPadding * kVocabPadding;
    validate_gpt_config(config);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string("model config: ") + e.what());
  }
  return config;
}
