// The zero-bubble schedules' compute orders (Qi, Wan, Huang, Lin, "Zero Bubble Pipeline
// Parallelism", ICLR 2024): each backward is split into I (input gradient) and W (parameter
// gradients, pipeline/schedule.h), and the W's, which no other stage waits for, fill the bubbles.
// Within each chunk the W's run in microbatch order, as B does in the other schedules, so every
// schedule adds a chunk's parameter gradients in the same order and gives bitwise the same sums.
// docs/pipeline.md shows the grids and derives their bubbles and memory.
#pragma once

#include <vector>

#include "pipeline/action.h"

// ZB-H1 (the paper's Figure 3, top), memory as 1F1B: stage s runs min(p - s, m) warm-up forwards,
// then s pairs (I, F), then triples (I, W, F) while forwards remain, then pairs (I, W), then the
// remaining W's. Every W is the oldest whose I has run. Stage 3 of p = 4, m = 8:
// F0 I0 F1 I1 F2 I2 F3 I3 W0 F4 I4 W1 F5 I5 W2 F6 I6 W3 F7 I7 W4 W5 W6 W7.
std::vector<Action> zb_h1_order(int p, int m, int stage);

// ZB-H2 (Figure 3, bottom): min(2 (p - s) - 1, m) warm-up forwards, then up to 2 s pairs (I, F)
// while forwards remain, then as ZB-H1. Every stage runs 2p - 1 forwards before its first W, so
// stage 0 holds up to 2p - 1 microbatches' activations.
std::vector<Action> zb_h2_order(int p, int m, int stage);

// ZB-V (Section 6), two chunks per stage in the V placement (chunk 0 is virtual stage s, chunk 1
// virtual stage 2p - 1 - s). With F0 meaning a forward on chunk 0: 2 (p - s) - 1 forwards on
// chunk 0; s pairs (F on chunk 1, F on chunk 0); p - s triples (F, I, W) on chunk 1; then the steady
// state (F, I, W on chunk 0, then F, I, W on chunk 1) until every forward has run; then s pairs
// (I on chunk 0, I on chunk 1), p - s pairs (I, W) on chunk 0, and the remaining W's, chunk 1's
// first. The order is built for max(m, 2p - 1) microbatches and the actions of microbatches
// m and above are dropped (as torch.distributed.pipelining's ScheduleZBVZeroBubble does).
std::vector<Action> zb_v_order(int p, int m, int stage);
