// The controllable-memory V schedules' compute orders (Qi, Wan, Huang, Lin, "Pipeline Parallelism
// with Controllable Memory", NeurIPS 2024): zb-v's placement (stage s holds virtual stages s and
// 2p - 1 - s) and split backwards, with a cap on the activations every stage holds.
//
// Memory unit: a (microbatch, chunk) held by the executor from its input's arrival until its W
// (the slot until I, then the weight-gradient inputs until W: pipeline/execute.h). The arrival is
// its forward, except that on the last stage chunk 0's forward hands its output over into chunk
// 1's slot (the V's local turn), so there chunk 1's unit is held from chunk 0's forward. One
// stage's worth of activations (the paper's M_B: one microbatch through a whole stage, both its
// chunks) is 2 units. The caps, in stages' worth, on every stage and for every m:
//   v-half: (p + 2) / 2   (1F1B's first stage holds p; zb-v p)
//   v-min:  (p + 4) / 3
//
// The order is built as the paper's generator builds it, with costs F = I = W: every stage repeats
// a steady pattern of period 6 (F on chunk 0, F on chunk 1, I on chunk 1, I on chunk 0, and two
// W's), whose offsets per stage the paper gives (V-Half: F.0 at 2s, F.1 at 3p - s - 2, I.1 at
// 3p + g + 2s - 1, I.0 at 6p + g - s - 2, g = 3 for even p; V-Min: s, 2p - s - 1, 2p + g + s,
// 4p + g - s - 1, g = 2 when 3 divides p; microbatch k at 6k later). W's fill the free slots, the
// oldest waiting W first (chunk 1's before chunk 0's), so each chunk's W's run in microbatch
// order, as every schedule adds a chunk's gradients (pipeline/zero_bubble.h). Then the warm-up and
// cool-down are squeezed: action by action in the pattern's time order, each moves to the
// earliest free slot after its inputs on its stage where the stage's units stay within the cap,
// once with the W's placed, once with them left out (as if each free slot ran a waiting W) and
// placed again. Any m >= 1 and p >= 1. At p = 4, m = 8 the idle share is 5/53 (v-half) and 11/59
// (v-min), the paper's generator's (tests/controllable_memory_test.cu).
#pragma once

#include <vector>

#include "pipeline/action.h"

// Every stage's compute order (index = stage). kind is v_half or v_min; throws std::runtime_error
// with one line for p < 1 or m < 1.
std::vector<std::vector<Action>> controllable_memory_orders(ScheduleKind kind, int p, int m);

// The cap in memory units (2 per stage's worth): 2 ((p + 2) / 2) for v-half, 2 ((p + 4) / 3) for v-min.
int controllable_memory_unit_cap(ScheduleKind kind, int p);
