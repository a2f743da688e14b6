// DualPipeV's compute order (DeepSeek-V3's DualPipe "cut in half": deepseek-ai/DualPipe's
// dualpipev.py, and PyTorch's ScheduleDualPipeV, which gives the same order): zb-v's placement
// (stage s holds virtual stages s and 2p - 1 - s, so the embedding and the head are on stage 0)
// and, in the steady phase, a forward on one chunk paired with a whole backward (B) on the other.
//
// With F0 meaning a forward on chunk 0 and each chunk's microbatches taken in order, stage s runs:
//   1. 2 (p - s - 1) forwards F0;
//   2. s + 1 pairs (F0, F1);
//   3. p - s - 1 triples (I1, the oldest waiting W, F1), zero-bubble style;
//   4. m - 2p + s + 1 times the pairs (F0, B1) then (F1, B0); on the last stage the first
//      (F0, B1) runs one after the other, not overlapped (theirs says: for a smaller bubble);
//   5. p - s - 1 times B1 then the pair (F1, B0);
//   6. s + 1 times (B1, B0), from the middle of these on (index (s + 1) / 2, before B1 on odd
//      stages, before B0 on even ones) as I's whose W's wait;
//   7. p - s - 1 times (the oldest waiting W, I0);
//   8. the s + 1 W's left, oldest first.
// The W's run first in first out, so each chunk's B's and W's (the computes that add its
// parameter gradients) run in microbatch order, as every schedule adds them (pipeline/schedule_file.h):
// theirs does the same, nothing is reordered. Each pair is the forward then the backward marked
// overlapped (Action::overlapped: "F7&B3.1", as PyTorch's CSV writes "(0F7;7B3)OVERLAP_F_B").
#pragma once

#include <vector>

#include "pipeline/action.h"

// Stage s's compute order; throws std::runtime_error with one line when m < 2p (the steady phase
// needs every stage's warm-up done: theirs asserts the same), or p, m or stage is out of range.
std::vector<Action> dual_pipe_v_order(int p, int m, int stage);
