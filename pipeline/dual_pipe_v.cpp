// DualPipeV's compute order (pipeline/dual_pipe_v.h): its eight phases per stage.
#include "pipeline/dual_pipe_v.h"

#include <array>
#include <deque>
#include <stdexcept>
#include <string>

namespace {

// One stage's order as it grows: the next microbatch of each chunk's forwards and backwards, and
// the W's whose I has run, oldest first.
struct OrderBuilder {
  std::vector<Action> order;
  std::array<int, 2> next_forward = {0, 0}, next_backward = {0, 0};  // by chunk
  std::deque<Action> waiting_weights;

  void forward(int chunk) { order.push_back({ActionKind::forward, next_forward[chunk]++, chunk}); }
  // B, or with split its I alone, its W left to wait.
  void backward(int chunk, bool split) {
    const int microbatch = next_backward[chunk]++;
    order.push_back({split ? ActionKind::backward_input : ActionKind::backward, microbatch, chunk});
    if (split) waiting_weights.push_back({ActionKind::backward_weight, microbatch, chunk});
  }
  void oldest_weight() {
    if (waiting_weights.empty()) return;
    order.push_back(waiting_weights.front());
    waiting_weights.pop_front();
  }
  // A forward on one chunk with a whole backward on the other, overlapped (run at the same time)
  // unless told otherwise.
  void pair(int forward_chunk, bool overlapped = true) {
    forward(forward_chunk);
    backward(1 - forward_chunk, false);
    order.back().overlapped = overlapped;
  }
};

}  // namespace

std::vector<Action> dual_pipe_v_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  if (m < 2 * p)
    throw std::runtime_error("--schedule dualpipev needs --microbatches at least 2 --pp = " + std::to_string(2 * p) +
                             "; got " + std::to_string(m));
  const int s = stage;
  OrderBuilder b;
  for (int i = 0; i < 2 * (p - s - 1); i++) b.forward(0);
  for (int i = 0; i < s + 1; i++) {
    b.forward(0);
    b.forward(1);
  }
  for (int i = 0; i < p - s - 1; i++) {
    b.backward(1, true);
    b.oldest_weight();
    b.forward(1);
  }
  for (int i = 0; i < m - 2 * p + s + 1; i++) {
    b.pair(0, !(s == p - 1 && i == 0));  // on the last stage, the first time, not overlapped (theirs)
    b.pair(1);
  }
  for (int i = 0; i < p - s - 1; i++) {
    b.backward(1, false);
    b.pair(1);
  }
  bool split = false;
  for (int i = 0; i < s + 1; i++) {
    if (i == (s + 1) / 2 && s % 2 == 1) split = true;
    b.backward(1, split);
    if (i == (s + 1) / 2 && s % 2 == 0) split = true;
    b.backward(0, split);
  }
  for (int i = 0; i < p - s - 1; i++) {
    b.oldest_weight();
    b.backward(0, split);
  }
  for (int i = 0; i < s + 1; i++) b.oldest_weight();
  return b.order;
}
