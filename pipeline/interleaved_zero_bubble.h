// The interleaved zero-bubble schedule's compute order (--schedule zb-interleaved): the zero-bubble
// paper's ZB-1P over v chunks per stage in the ring placement, as torch.distributed.pipelining's
// ScheduleInterleavedZeroBubble builds it. Each backward is split into I and W (pipeline/zero_bubble.h).
//
// The microbatches go in rounds, as PyTorch's flexible interleaving has them: rounds = max(1, m / p),
// n = m / rounds microbatches per round (m must be a multiple of rounds). The k-th forward of a stage
// runs chunk (k / n) mod v, the k-th I chunk v - 1 - (k / n) mod v, each on the next microbatch of
// its chunk. Stage s of p runs
//   1. w = min((v - 1) n + p - 1 - s, m v) warm-up forwards (interleaved 1F1B has 2 (p - 1 - s));
//   2. m v - w steps of one forward and one I;
//   3. the remaining w I's;
//   4. the remaining W's;
// and in 2 and 3 a W after the k-th I for every k >= s (none in the first s steps, whose bubble the
// W's would otherwise not leave to the stage below). Each W is the oldest I's whose W has not run,
// so each chunk's W's run in microbatch order, as every schedule adds a chunk's gradients. Stage 1
// of p = 2, m = 4, v = 2 (n = 2, w = 2):
//   F0 F1 F0.1 I0.1 F1.1 I1.1 W0.1 F2 I0 W1.1 F3 I1 W0 F2.1 I2.1 W1 F3.1 I3.1 W2.1 I2 W3.1 I3 W2 W3
// PyTorch inserts idle slots where an input is late; our lowering times the orders itself
// (add_communication_in_time_order), so the order is all it needs.
#pragma once

#include <vector>

#include "pipeline/action.h"

// Stage's compute order. Throws std::runtime_error with one line for p < 1, m < 1, a stage outside
// [0, p), v < 2, or m not a multiple of its rounds (naming the numbers and the nearest m that fit).
std::vector<Action> zb_interleaved_order(int p, int m, int v, int stage);
// The warm-up forwards of the stage (w above).
int zb_interleaved_warmup(int p, int m, int v, int stage);
