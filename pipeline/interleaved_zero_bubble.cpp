// The interleaved zero-bubble schedule's compute order (pipeline/interleaved_zero_bubble.h).
#include "pipeline/interleaved_zero_bubble.h"

#include <algorithm>
#include <deque>
#include <stdexcept>
#include <string>

namespace {

int rounds_of(int p, int m) { return std::max(1, m / p); }
bool fits_rounds(int p, int m) { return m % rounds_of(p, m) == 0; }

void check_zb_interleaved(int p, int m, int v, int stage) {
  check_pipeline_stage(p, m, stage);
  if (v < 2)
    throw std::runtime_error("--schedule zb-interleaved needs --virtual-stages 2 or more (chunks per stage); got " +
                             std::to_string(v));
  if (!fits_rounds(p, m)) {
    int below = m, above = m;
    while (!fits_rounds(p, below)) below--;
    while (!fits_rounds(p, above)) above++;
    throw std::runtime_error("--schedule zb-interleaved needs --microbatches a multiple of its rounds, max(1, " +
                             std::to_string(m) + " / --pp " + std::to_string(p) + ") = " +
                             std::to_string(rounds_of(p, m)) + ", as PyTorch's; got " + std::to_string(m) + ": use " +
                             std::to_string(below) + " or " + std::to_string(above));
  }
}

}  // namespace

int zb_interleaved_warmup(int p, int m, int v, int stage) {
  check_zb_interleaved(p, m, v, stage);
  const int per_round = m / rounds_of(p, m);
  return std::min((v - 1) * per_round + p - 1 - stage, m * v);
}

std::vector<Action> zb_interleaved_order(int p, int m, int v, int stage) {
  const int warmup = zb_interleaved_warmup(p, m, v, stage);
  const int per_round = m / rounds_of(p, m), total = m * v;
  std::vector<int> forwards(v, 0), inputs(v, 0);  // per chunk: the next microbatch
  std::deque<Action> waiting_weights;             // I's run, in order, whose W has not
  std::vector<Action> order;
  auto forward = [&](int k) {
    const int chunk = k / per_round % v;
    order.push_back({ActionKind::forward, forwards[chunk]++, chunk});
  };
  auto input = [&](int k) {
    const int chunk = v - 1 - k / per_round % v;
    order.push_back({ActionKind::backward_input, inputs[chunk]++, chunk});
    waiting_weights.push_back({ActionKind::backward_weight, order.back().microbatch, chunk});
  };
  auto weight = [&] {
    order.push_back(waiting_weights.front());
    waiting_weights.pop_front();
  };
  for (int k = 0; k < warmup; k++) forward(k);
  for (int k = 0; k < total; k++) {
    if (k < total - warmup) forward(k + warmup);  // the steady state's forward; none in the cool-down
    input(k);
    if (k >= stage) weight();
  }
  while (!waiting_weights.empty()) weight();
  return order;
}
