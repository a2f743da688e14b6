// A tensor-parallel rank's slices and sizes (model/tensor_parallel_shard.h).
#include "model/tensor_parallel_shard.h"

BlockSlices block_slices(const GPTConfig& config, TensorParallelRank shard) {
  const int C = config.channels, tp = shard.tp, r = shard.rank;
  return {attention_qkv_slice(tp, r, C, config.num_heads), row_parallel_slice(tp, r, C, C),
          column_parallel_slice(tp, r, C, 4 * C), row_parallel_slice(tp, r, 4 * C, C)};
}

std::optional<LinearSlice> tensor_cut(const GPTConfig& config, TensorParallelRank shard, int tensor) {
  if (shard.tp == 1) return std::nullopt;
  const BlockSlices s = block_slices(config, shard);
  // A column-parallel bias: the weight's output rows of a one-column matrix.
  const auto bias_of = [](LinearSlice weight) {
    weight.in_channels = 1;
    return weight;
  };
  switch (tensor) {
    case kQkvw: return s.qkv;
    case kQkvb: return bias_of(s.qkv);
    case kAttprojw: return s.attproj;
    case kFcw: return s.fc;
    case kFcb: return bias_of(s.fc);
    case kFcprojw: return s.fcproj;
    default: return std::nullopt;
  }
}

bool replicated_on_tp_ranks(int tensor) {
  switch (tensor) {
    case kWte: case kQkvw: case kQkvb: case kAttprojw: case kFcw: case kFcb: case kFcprojw: return false;
    default: return true;
  }
}

std::array<size_t, kNumParameterTensors> shard_tensor_sizes(const GPTConfig& config, TensorParallelRank shard) {
  std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  sizes[kWte] /= shard.tp;
  for (int tensor = kLn1w; tensor <= kFcprojb; ++tensor)
    if (const std::optional<LinearSlice> cut = tensor_cut(config, shard, tensor))
      sizes[tensor] = size_t(config.num_layers) * cut->local_out() * cut->local_in();
  return sizes;
}
