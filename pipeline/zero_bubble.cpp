// The zero-bubble schedules' compute orders (pipeline/zero_bubble.h).
#include "pipeline/zero_bubble.h"

#include <algorithm>
#include <deque>

namespace {

// One stage's order of one chunk's actions, built a phase at a time: each F, I and W takes the
// next microbatch of its kind, each W the oldest microbatch whose I has run.
struct ChunkOrder {
  ChunkOrder(int m, int chunk, std::vector<Action>* order) : m(m), chunk(chunk), order(order) {}
  int m;      // microbatches
  int chunk;  // the chunk every action runs on
  std::vector<Action>* order;
  int forwards = 0, inputs = 0;
  std::deque<int> waiting_weights;  // microbatches whose I has run and W not

  bool forward_left() const { return forwards < m; }
  bool input_left() const { return inputs < forwards; }
  bool weight_left() const { return !waiting_weights.empty(); }
  void forward() { order->push_back({ActionKind::forward, forwards++, chunk}); }
  void input() {
    waiting_weights.push_back(inputs);
    order->push_back({ActionKind::backward_input, inputs++, chunk});
  }
  void weight() {
    order->push_back({ActionKind::backward_weight, waiting_weights.front(), chunk});
    waiting_weights.pop_front();
  }
};

// ZB-H1 and H2 differ only in the warm-up and how many (I, F) pairs follow it.
std::vector<Action> zero_bubble_h_order(int m, int warmup, int input_forward_pairs) {
  std::vector<Action> order;
  ChunkOrder o{m, 0, &order};
  for (int k = 0; k < warmup && o.forward_left(); k++) o.forward();
  for (int k = 0; k < input_forward_pairs && o.forward_left(); k++) {
    o.input();
    o.forward();
  }
  while (o.forward_left()) {
    o.input();
    o.weight();
    o.forward();
  }
  while (o.input_left()) {
    o.input();
    o.weight();
  }
  while (o.weight_left()) o.weight();
  return order;
}

}  // namespace

std::vector<Action> zb_h1_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  return zero_bubble_h_order(m, p - stage, stage);
}

std::vector<Action> zb_h2_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  return zero_bubble_h_order(m, 2 * (p - stage) - 1, 2 * stage);
}

std::vector<Action> zb_v_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  const int n = std::max(m, 2 * p - 1);
  std::vector<Action> order;
  ChunkOrder down{n, 0, &order}, up{n, 1, &order};  // chunk 0 goes down the stages, chunk 1 up
  for (int k = 0; k < 2 * (p - stage) - 1; k++) down.forward();
  for (int k = 0; k < stage; k++) {
    up.forward();
    down.forward();
  }
  for (int k = 0; k < p - stage; k++) {
    up.forward();
    up.input();
    up.weight();
  }
  while (down.forward_left() || up.forwards < down.forwards) {
    if (down.forward_left()) down.forward();
    down.input();
    down.weight();
    up.forward();
    up.input();
    up.weight();
  }
  for (int k = 0; k < stage; k++) {
    down.input();
    up.input();
  }
  for (int k = 0; k < p - stage; k++) {
    down.input();
    down.weight();
  }
  while (up.weight_left()) up.weight();
  while (down.weight_left()) down.weight();
  std::erase_if(order, [&](const Action& a) { return a.microbatch >= m; });
  return order;
}
