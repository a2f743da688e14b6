// How a transformer block computes its attention (./train --attention): a choice of the run, not
// of the model (the checkpoint's GPTConfig does not hold it), which sizes the activations.
#pragma once

// materialized: the kernels of kernels/attention.cuh, which keep q, k, v per head and the
// B NH T T probabilities. fused: FlashAttention-2's kernels (kernels/fused_attention.cuh), which
// keep the block's qkv projection and one log-sum-exp per row and recompute the probabilities in
// the backward.
enum class AttentionKind { materialized, fused };

// "materialized" or "fused", the option's spelling.
inline const char* attention_name(AttentionKind attention) {
  return attention == AttentionKind::fused ? "fused" : "materialized";
}
