// The controllable-memory V schedules' compute orders (pipeline/controllable_memory.h): the steady
// pattern, the W's in its free slots, and the squeeze under the memory cap.
#include "pipeline/controllable_memory.h"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <tuple>

namespace {

// A stage's six kinds of compute, in the pattern's order within a period.
enum Kind { forward0, forward1, input1, input0, weight1, weight0, kinds };
constexpr int kPeriod = 6;  // one microbatch's computes on a stage, each one slot

Action action_of(int kind, int microbatch) {
  constexpr std::array<ActionKind, kinds> action_kinds = {
      ActionKind::forward,        ActionKind::forward,         ActionKind::backward_input,
      ActionKind::backward_input, ActionKind::backward_weight, ActionKind::backward_weight};
  constexpr std::array<int, kinds> chunks = {0, 1, 1, 0, 1, 0};
  return {action_kinds[kind], microbatch, chunks[kind]};
}

struct Compute {
  int stage, kind, microbatch;
};

// Slots of unit length: slot[stage][kind * m + microbatch], -1 while not placed.
struct Grid {
  int p, m, cap;
  std::vector<std::vector<int>> slot;
  int& at(const Compute& c) { return slot[c.stage][c.kind * m + c.microbatch]; }
  bool occupied(int stage, int time) const {
    return std::find(slot[stage].begin(), slot[stage].end(), time) != slot[stage].end();
  }
};

// What a compute waits for: its input (the neighbouring virtual stage's compute, or this stage's
// own across the V's turn and at the loss) and its kind's previous microbatch.
std::vector<Compute> inputs_of(const Grid& g, const Compute& c) {
  const int s = c.stage, k = c.microbatch, last = g.p - 1;
  std::vector<Compute> inputs;
  switch (c.kind) {
    case forward0: if (s > 0) inputs.push_back({s - 1, forward0, k}); break;
    case forward1: inputs.push_back(s == last ? Compute{s, forward0, k} : Compute{s + 1, forward1, k}); break;
    case input1: inputs.push_back(s == 0 ? Compute{s, forward1, k} : Compute{s - 1, input1, k}); break;
    case input0: inputs.push_back(s == last ? Compute{s, input1, k} : Compute{s + 1, input0, k}); break;
    case weight1: inputs.push_back({s, input1, k}); break;
    case weight0: inputs.push_back({s, input0, k}); break;
  }
  if (k > 0) inputs.push_back({s, c.kind, k - 1});
  return inputs;
}

// Units a compute takes (+) or gives back (-) on its stage (the header's memory unit).
int units_of(const Grid& g, int stage, int kind) {
  const bool turn = stage == g.p - 1;
  if (kind == forward0) return turn ? 2 : 1;
  if (kind == forward1) return turn ? 0 : 1;
  return kind == weight0 || kind == weight1 ? -1 : 0;
}

// The stage's most units held at once. With implied_weights its W's are not placed and each free
// slot runs a waiting one.
int peak_units(const Grid& g, int stage, bool implied_weights) {
  std::vector<int> kind_at;  // by time: the kind placed there, or -1
  for (int kind = 0; kind < kinds; kind++)
    for (int k = 0; k < g.m; k++) {
      const int time = g.slot[stage][kind * g.m + k];
      if (time < 0) continue;
      if (time >= int(kind_at.size())) kind_at.resize(time + 1, -1);
      kind_at[time] = kind;
    }
  int units = 0, peak = 0, waiting = 0;
  for (int kind : kind_at) {
    if (kind >= 0) {
      units += units_of(g, stage, kind);
      waiting += kind == input0 || kind == input1;
    } else if (implied_weights && waiting > 0) {
      waiting--;
      units--;
    }
    peak = std::max(peak, units);
  }
  return peak;
}

// The stage's W's in its free slots: at each free slot the oldest W whose I ran before it, chunk
// 1's first, so each chunk's W's follow its I's, in microbatch order.
void place_weights(Grid& g, int stage) {
  std::vector<int>& slots = g.slot[stage];
  std::fill(slots.begin() + weight1 * g.m, slots.end(), -1);
  std::array<int, 2> placed = {0, 0};  // by chunk: W's placed
  for (int time = 0; placed[0] + placed[1] < 2 * g.m; time++) {
    if (g.occupied(stage, time)) continue;
    for (int chunk : {1, 0}) {
      const int input = chunk == 1 ? input1 : input0, weight = chunk == 1 ? weight1 : weight0;
      const int k = placed[chunk];
      if (k < g.m && slots[input * g.m + k] >= 0 && slots[input * g.m + k] < time) {
        slots[weight * g.m + k] = time;
        placed[chunk]++;
        break;
      }
    }
  }
}

// The squeeze: in the current time order, each placed compute moves to the earliest free slot
// after its inputs where its stage stays within the cap.
void squeeze(Grid& g, bool implied_weights) {
  std::vector<std::tuple<int, int, int, int>> order;  // (time, stage, kind, microbatch)
  for (int s = 0; s < g.p; s++)
    for (int kind = 0; kind < kinds; kind++)
      for (int k = 0; k < g.m; k++)
        if (g.slot[s][kind * g.m + k] >= 0) order.push_back({g.slot[s][kind * g.m + k], s, kind, k});
  std::sort(order.begin(), order.end());
  for (const auto& [time, s, kind, k] : order) {
    const Compute c{s, kind, k};
    int earliest = 0;
    for (const Compute& input : inputs_of(g, c)) earliest = std::max(earliest, g.at(input) + 1);
    const int original = g.at(c);
    for (int t = earliest; t < original; t++) {
      if (g.occupied(s, t)) continue;
      g.at(c) = t;
      if (peak_units(g, s, implied_weights) <= g.cap) break;
      g.at(c) = original;
    }
  }
}

// The paper's steady pattern: the slot of each kind's microbatch 0 on stage s (F.0, F.1, I.1, I.0).
std::array<int, 4> pattern_offsets(ScheduleKind kind, int p, int s) {
  if (kind == ScheduleKind::v_half) {
    const int g = p % 2 == 0 ? 3 : 0;
    return {2 * s, 3 * p - s - 2, 3 * p + g + 2 * s - 1, 6 * p + g - s - 2};
  }
  const int g = p % 3 == 0 ? 2 : 0;
  return {s, 2 * p - s - 1, 2 * p + g + s, 4 * p + g - s - 1};
}

}  // namespace

int controllable_memory_unit_cap(ScheduleKind kind, int p) {
  if (kind == ScheduleKind::v_half) return 2 * ((p + 2) / 2);
  if (kind == ScheduleKind::v_min) return 2 * ((p + 4) / 3);
  throw std::logic_error("controllable_memory_unit_cap: " + schedule_name(kind));
}

std::vector<std::vector<Action>> controllable_memory_orders(ScheduleKind kind, int p, int m) {
  check_pipeline_stage(p, m, 0);
  Grid g{p, m, controllable_memory_unit_cap(kind, p), std::vector<std::vector<int>>(p, std::vector<int>(kinds * m, -1))};
  for (int s = 0; s < p; s++) {
    const std::array<int, 4> offsets = pattern_offsets(kind, p, s);
    for (int k = 0; k < m; k++)
      for (int kind_index = 0; kind_index < 4; kind_index++)
        g.slot[s][kind_index * m + k] = offsets[kind_index] + kPeriod * k;
    place_weights(g, s);
  }
  squeeze(g, false);
  for (int s = 0; s < p; s++) std::fill(g.slot[s].begin() + weight1 * m, g.slot[s].end(), -1);
  squeeze(g, true);
  std::vector<std::vector<Action>> orders(p);
  for (int s = 0; s < p; s++) {
    place_weights(g, s);
    std::vector<std::pair<int, Action>> timed;
    for (int kind_index = 0; kind_index < kinds; kind_index++)
      for (int k = 0; k < m; k++) timed.push_back({g.slot[s][kind_index * m + k], action_of(kind_index, k)});
    std::sort(timed.begin(), timed.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (const auto& [time, action] : timed) orders[s].push_back(action);
  }
  return orders;
}
