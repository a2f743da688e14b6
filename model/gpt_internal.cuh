// What model/gpt.cu and model/gpt_split_backward.cu share: carving one allocation into views,
// the checks every range function makes, and where a block's input is.
#pragma once
#include <stdexcept>
#include <string>

#include "model/gpt.cuh"

namespace gpt_internal {

// Hands out consecutive pieces of one allocation, each aligned to 256 bytes (cudaMalloc's
// alignment, so a view is as aligned as a buffer of its own). With a null base it only
// counts: the same code then gives the size and, once allocated, the views.
class Carver {
 public:
  explicit Carver(void* base) : base_(static_cast<char*>(base)) {}
  template <typename X>
  X* take(size_t count) {
    X* piece = base_ ? reinterpret_cast<X*>(base_ + bytes_) : nullptr;
    bytes_ += (count * sizeof(X) + kAlignment - 1) / kAlignment * kAlignment;
    return piece;
  }
  size_t bytes() const { return bytes_; }

 private:
  static constexpr size_t kAlignment = 256;
  char* base_;
  size_t bytes_ = 0;
};

inline std::string describe(const LayerRange& range) {
  return "layer range [" + std::to_string(range.first_layer) + ", " + std::to_string(range.end_layer) + ")";
}

inline bool same_range(const LayerRange& a, const LayerRange& b) {
  return a.first_layer == b.first_layer && a.end_layer == b.end_layer && a.has_embedding == b.has_embedding &&
         a.has_head == b.has_head;
}

// The checks shared by forward and backward: the parameters' views hold the range's layers (as
// far as they tell), the buffers were made for this range and hold (B, T).
template <typename Element>
void check_call(const GPTConfig& config, const LayerRange& range, const ParameterTensors<Element>& params,
                const Activations<Element>& acts, const int* tokens, const Element* input, int B, int T,
                const char* function) {
  const std::string where = std::string(function) + ": " + describe(range);
  if (params.first_layer > range.first_layer)
    throw std::runtime_error(where + ": the parameter views start at layer " + std::to_string(params.first_layer));
  if (!same_range(range, acts.range)) throw std::runtime_error(where + ": activations were made for another range");
  if (B < 1 || T < 1 || B > acts.B || T > acts.T || T > config.max_seq_len)
    throw std::runtime_error(where + ": B " + std::to_string(B) + ", T " + std::to_string(T) +
                             " outside the activations' B " + std::to_string(acts.B) + ", T " + std::to_string(acts.T) +
                             " (and maxT " + std::to_string(config.max_seq_len) + ")");
  if (range.has_embedding && !tokens) throw std::runtime_error(where + ": the embedding needs tokens");
  if (!range.has_embedding && !input) throw std::runtime_error(where + ": a range without the embedding needs input");
}

// The input of block l (the embedding output, the range input, or the previous block's output).
template <typename Element>
const Element* block_input(const Activations<Element>& acts, const Element* input, int l) {
  const int i = l - acts.range.first_layer;
  if (i > 0) return acts.blocks[i - 1].residual3;
  return acts.range.has_embedding ? acts.encoded : input;
}

// The input of the final LayerNorm: the last block's output, or the block-less range's input.
template <typename Element>
const Element* head_input(const Activations<Element>& acts, const Element* input) {
  return block_input(acts, input, acts.range.end_layer);
}

}  // namespace gpt_internal
