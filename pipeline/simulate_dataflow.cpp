// The dry run of compute orders with transfers that hold no stage (pipeline/simulate.h's
// simulate_dataflow): each stage advances through its computes as far as their inputs allow;
// a compute's start depends only on its stage's clock and its input's arrival, so the order in
// which stages are advanced does not change the result.
#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

#include "pipeline/simulate.h"

namespace {

using Key = std::pair<int, int>;  // (microbatch, virtual stage)

class DataflowSimulator {
 public:
  DataflowSimulator(const std::vector<std::vector<Action>>& compute, const StepCosts& costs, PlacementKind placement)
      : compute_(compute), costs_(costs), layout_{placement, int(compute.size()), 1}, state_(compute.size()) {
    for (const std::vector<Action>& order : compute)
      for (const Action& a : order) layout_.v = std::max(layout_.v, a.chunk + 1);
    if (placement == PlacementKind::v_shape) layout_.v = 2;
  }

  Simulation run() {
    Simulation result{0, {}, {}, {}, {}, ""};
    for (const std::vector<Action>& order : compute_) {
      result.start_time.emplace_back(order.size(), -1.0);
      result.end_time.emplace_back(order.size(), -1.0);
    }
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < layout_.p; s++)
        while (advance(s, result)) progress = true;
    }
    for (const StageState& state : state_) result.makespan = std::max(result.makespan, state.clock);
    for (const StageState& state : state_)
      result.stages.push_back({state.busy, result.makespan > 0 ? 1 - state.busy / result.makespan : 0,
                               state.peak_in_flight, state.peak_pending, {}, {}});
    result.deadlock = deadlock_report();
    return result;
  }

 private:
  struct StageState {
    size_t next = 0;
    double clock = 0;
    double busy = 0;
    int in_flight = 0, pending = 0, peak_in_flight = 0, peak_pending = 0;
    std::set<Key> split, weighted;  // through I; through W
  };

  // When the input of compute a on stage s is there, or -1 when it is not yet. Throws for an
  // order that breaks the data flow on the stage itself.
  double ready_time(int s, const Action& a) const {
    const StageState& state = state_[s];
    const int vs = layout_.virtual_stage(s, a.chunk);
    const Key own{a.microbatch, vs};
    if (a.kind == ActionKind::forward) {
      if (forward_end_.count(own)) fail(s, "repeats " + to_text(a));
      return vs == 0 ? 0 : arrival(s, forward_end_, {a.microbatch, vs - 1});
    }
    if (a.kind == ActionKind::backward_weight) {
      if (state.weighted.count(own)) fail(s, "repeats " + to_text(a));
      if (!state.split.count(own)) fail(s, "runs " + to_text(a) + " before its I" + to_text(a).substr(1));
      return 0;
    }
    if (!forward_end_.count(own)) fail(s, "runs " + to_text(a) + " before its forward");
    if (backward_end_.count(own))
      fail(s, std::string(state.split.count(own) == (a.kind == ActionKind::backward_input) ? "repeats "
                                                                                           : "runs both B and I of ") +
                  to_text(a));
    return vs == layout_.virtual_stages() - 1 ? 0 : arrival(s, backward_end_, {a.microbatch, vs + 1});
  }

  // When what `from` produced reaches stage s: latency after it ended on another stage.
  double arrival(int s, const std::map<Key, double>& ends, const Key& from) const {
    const auto found = ends.find(from);
    if (found == ends.end()) return -1;
    return found->second + (layout_.stage_of(from.second) == s ? 0 : costs_.latency);
  }

  // The next compute, or overlapped pair (pipeline/action.h), of stage s, if its inputs are there.
  // A pair is one slot: both computes start when both inputs are there and end together, after
  // pair_time of their costs; the forward's slot is counted before the backward gives one back.
  bool advance(int s, Simulation& result) {
    StageState& state = state_[s];
    const std::vector<Action>& order = compute_[s];
    if (state.next == order.size()) return false;
    const size_t count = state.next + 1 < order.size() && order[state.next + 1].overlapped ? 2 : 1;
    double start = state.clock, slot = 0;
    for (size_t k = 0; k < count; k++) {
      const double ready = ready_time(s, order[state.next + k]);
      if (ready < 0) return false;
      start = std::max(start, ready);
      const double cost = compute_time(costs_, order[state.next + k]);
      slot = k == 0 ? cost : pair_time(costs_, slot, cost);
    }
    for (size_t k = 0; k < count; k++)
      if (order[state.next + k].kind == ActionKind::forward)
        state.peak_in_flight = std::max(state.peak_in_flight, ++state.in_flight);
    state.clock = start + slot;
    state.busy += slot;
    for (size_t k = 0; k < count; k++) {
      const Action& a = order[state.next];
      const Key own{a.microbatch, layout_.virtual_stage(s, a.chunk)};
      if (a.kind == ActionKind::backward_weight) {
        state.weighted.insert(own);
        state.pending--;
      } else if (a.kind != ActionKind::forward) {
        state.in_flight--;
        if (a.kind == ActionKind::backward_input) {
          state.split.insert(own);
          state.peak_pending = std::max(state.peak_pending, ++state.pending);
        }
      }
      if (a.kind != ActionKind::backward_weight) (a.kind == ActionKind::forward ? forward_end_ : backward_end_)[own] = state.clock;
      result.start_time[s][state.next] = start;
      result.end_time[s][state.next] = state.clock;
      state.next++;
    }
    return true;
  }

  std::vector<StageSchedule> grid() const {
    std::vector<StageSchedule> rows(compute_.size());
    for (size_t s = 0; s < compute_.size(); s++)
      for (const Action& a : compute_[s]) rows[s].push_back({a});
    return rows;
  }

  [[noreturn]] void fail(int s, const std::string& problem) const {
    std::vector<int> marked(compute_.size(), -1);
    marked[s] = int(state_[s].next);
    throw std::runtime_error("schedule error: stage " + std::to_string(s) + " step " + std::to_string(marked[s]) +
                             " " + problem + "\n" + format_grid_with_communication(grid(), marked));
  }

  // Each stuck compute and the input it waits for.
  std::string deadlock_report() const {
    std::string report;
    std::vector<int> marked(compute_.size(), -1);
    for (int s = 0; s < layout_.p; s++) {
      const StageState& state = state_[s];
      if (state.next == compute_[s].size()) continue;
      marked[s] = int(state.next);
      const Action& a = compute_[s][state.next];
      const int vs = layout_.virtual_stage(s, a.chunk);
      const bool forward = a.kind == ActionKind::forward;
      const int from = forward ? vs - 1 : vs + 1;
      report += "stage " + std::to_string(s) + " waits at step " + std::to_string(state.next) + " (" + to_text(a) +
                ") for " + (forward ? "the activation" : "the gradient") + " of microbatch " +
                std::to_string(a.microbatch) + " from stage " + std::to_string(layout_.stage_of(from)) + " chunk " +
                std::to_string(layout_.chunk_of(from)) + "\n";
    }
    if (report.empty()) return "";
    return "deadlock:\n" + report + format_grid_with_communication(grid(), marked);
  }

  const std::vector<std::vector<Action>>& compute_;
  StepCosts costs_;
  Placement layout_;
  std::vector<StageState> state_;
  // When each (microbatch, virtual stage)'s forward and input gradient (B or I) ended.
  std::map<Key, double> forward_end_, backward_end_;
};

}  // namespace

Simulation simulate_dataflow(const std::vector<std::vector<Action>>& compute, const StepCosts& costs,
                             PlacementKind placement) {
  return DataflowSimulator(compute, costs, placement).run();
}

std::string format_timeline(const std::vector<std::vector<Action>>& compute, const Simulation& simulation,
                            const StepCosts& costs) {
  std::vector<StageSchedule> rows(compute.size());
  for (size_t s = 0; s < compute.size(); s++)
    for (const Action& a : compute[s]) rows[s].push_back({a});
  return format_timeline(rows, simulation, costs);
}
