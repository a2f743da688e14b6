// The measured costs --layers-per-stage auto partitions with (trainer/program/auto_layer_split.h):
// on this rank's device, before anything of the run is allocated, a few timed forwards and
// backwards of one microbatch through each kind of layer the split moves: one transformer block,
// the embedding alone, the head alone (final LayerNorm, logits, loss), and one AdamW update of each
// kind's parameters (PipeDream updates after every K-th backward: pipeline/pipedream.h). Every block
// costs the same (the same shapes, the same kernels), so one block stands for all.
//
// Each figure is the median of `repeats` timed calls after one untimed call (which pays for the
// first touch of the buffers), from the host's clock around the call and a stream synchronisation:
// what a stage waits for, launches included. Parameters and inputs are zeros: the kernels' time
// does not depend on the values, and zeros are neither NaN nor subnormal.
#pragma once
#include "model/attention_kind.h"
#include "model/config.h"

// Nanoseconds per microbatch of B sequences of T tokens; integers, so that sums over ranks are
// exact in a double whatever their order (trainer/program/auto_layer_split.cpp).
struct MeasuredLayerCosts {
  double block_forward, block_backward;
  double embedding_forward, embedding_backward;
  double head_forward, head_backward;
  // One AdamW update of the kind's parameters (the head's: the final LayerNorm and the tied copy of
  // wte, which the last stage updates itself, trainer/step/pipedream_updates.h).
  double block_update, embedding_update, head_update;
};

// Element: the run's (float or __nv_bfloat16). tf32: the run's cuBLAS math mode for fp32 GEMMs.
// Allocates and frees its own device memory, one layer kind at a time.
template <typename Element>
MeasuredLayerCosts probe_layer_costs(const GPTConfig& config, int B, int T, AttentionKind attention, bool tf32,
                                     int repeats);
