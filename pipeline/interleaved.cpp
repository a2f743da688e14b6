// Megatron's interleaved order with flexible microbatch groups (pipeline/interleaved.h).
#include "pipeline/interleaved.h"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

namespace {

std::string text(int n) { return std::to_string(n); }

// The (microbatch, chunk) of every forward, in order: groups of N microbatches, each through
// chunk 0, then chunk 1, ...; the last group takes the microbatches left.
std::vector<std::pair<int, int>> forward_table(int m, int v, int group) {
  std::vector<std::pair<int, int>> table;
  for (int first = 0; first < m; first += group) {
    const int end = first + group >= m ? m : first + group;
    for (int chunk = 0; chunk < v; chunk++)
      for (int microbatch = first; microbatch < end; microbatch++) table.push_back({microbatch, chunk});
  }
  return table;
}

}  // namespace

int interleaved_group(int p, int group) { return group == 0 ? p : group; }

void check_interleaved(int p, int m, int v, int stage, int group) {
  check_pipeline_stage(p, m, stage);
  if (v < 1) throw std::runtime_error("--virtual-stages " + text(v) + " must be at least 1");
  if (m < p)
    throw std::runtime_error("the interleaved schedule needs --microbatches at least --pp " + text(p) + "; got " +
                             text(m) + ": use " + text(p) + " or more");
  const int n = interleaved_group(p, group);
  if (n < p || n > m)
    throw std::runtime_error("--microbatch-group " + text(n) + " must be in [--pp " + text(p) + ", --microbatches " +
                             text(m) + "] (the microbatches each chunk runs in a row): use " + text(p) +
                             (m > p ? " to " + text(m) : ""));
  const int last = m % n;
  if (last > 0 && last < p)
    throw std::runtime_error("--microbatches " + text(m) + " leaves a last group of " + text(last) +
                             " after groups of --microbatch-group " + text(n) + ", fewer than --pp " + text(p) +
                             " (the pipeline would wait in dependency bubbles): use --microbatch-group " + text(m) +
                             ", or --microbatches " + text(m - last) + " or " + text(m - last + n));
}

int interleaved_warmup(int p, int m, int v, int stage, int group) {
  check_interleaved(p, m, v, stage, group);
  return std::min(m * v, 2 * (p - stage - 1) + (v - 1) * interleaved_group(p, group));
}

std::vector<Action> interleaved_order(int p, int m, int v, int stage, int group) {
  const int total = m * v;
  const int warmup = interleaved_warmup(p, m, v, stage, group);
  const std::vector<std::pair<int, int>> table = forward_table(m, v, interleaved_group(p, group));
  auto forward = [&](int k) { return Action{ActionKind::forward, table[k].first, table[k].second}; };
  auto backward = [&](int k) { return Action{ActionKind::backward, table[k].first, v - 1 - table[k].second}; };
  std::vector<Action> order;
  for (int k = 0; k < warmup; k++) order.push_back(forward(k));
  for (int k = 0; k < total - warmup; k++) {  // steady state: one forward, one backward
    order.push_back(forward(k + warmup));
    order.push_back(backward(k));
  }
  for (int k = total - warmup; k < total; k++) order.push_back(backward(k));
  return order;
}
