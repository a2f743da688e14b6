// The dry run of a schedule as the executor runs it (pipeline/simulate.h's simulate_transfer_stream):
// computes in list order on the compute stream, groups in list order on one transfer stream. Each
// stage advances both streams as far as their waits allow; every time depends only on earlier
// times, so the order in which stages are advanced does not change the result.
#include <algorithm>
#include <map>
#include <stdexcept>
#include <tuple>

#include "pipeline/simulate.h"

namespace {

using ActionKey = std::tuple<ActionKind, int, int>;  // (kind, microbatch, chunk)

ActionKey key(ActionKind kind, const Action& a) { return {kind, a.microbatch, a.chunk}; }

// Per step of one stage, the steps of the same stage it waits for: a compute, for the group
// holding its input's receive (none for a local input); a group, for the computes producing its
// sends.
std::vector<std::vector<size_t>> local_waits(const StageSchedule& steps) {
  std::map<ActionKey, size_t> step_of;
  for (size_t i = 0; i < steps.size(); i++)
    for (const Action& a : steps[i]) step_of[key(a.kind, a)] = i;
  const auto add = [&](std::vector<size_t>& waits, ActionKey k) {
    if (const auto found = step_of.find(k); found != step_of.end()) waits.push_back(found->second);
  };
  std::vector<std::vector<size_t>> waits(steps.size());
  for (size_t i = 0; i < steps.size(); i++)
    for (const Action& a : steps[i]) {
      if (a.kind == ActionKind::forward) add(waits[i], key(ActionKind::recv_forward, a));
      if (computes_input_gradient(a.kind)) add(waits[i], key(ActionKind::recv_backward, a));
      if (a.kind == ActionKind::send_forward) add(waits[i], key(ActionKind::forward, a));
      if (a.kind == ActionKind::send_backward) {
        add(waits[i], key(ActionKind::backward, a));
        add(waits[i], key(ActionKind::backward_input, a));
      }
    }
  return waits;
}

}  // namespace

Simulation simulate_transfer_stream(const std::vector<StageSchedule>& stages, const StepCosts& costs,
                                    PlacementKind placement) {
  Simulation result = simulate(stages, costs, placement);
  if (!result.deadlock.empty()) return result;
  const size_t p = stages.size();
  // For each group step, the steps of the other stages where its sends and receives are matched.
  std::vector<std::vector<std::vector<std::pair<int, int>>>> peers(p);
  std::vector<std::vector<std::vector<size_t>>> waits(p);
  for (size_t s = 0; s < p; s++) {
    peers[s].resize(stages[s].size());
    waits[s] = local_waits(stages[s]);
  }
  for (const MessageLink& link : result.messages) {
    peers[link.send_stage][link.send_step].push_back({link.recv_stage, link.recv_step});
    peers[link.recv_stage][link.recv_step].push_back({link.send_stage, link.send_step});
  }
  // start_time of a group is when it is posted; end_time when it completes.
  std::vector<std::vector<double>> start(p), end(p);
  for (size_t s = 0; s < p; s++) start[s] = end[s] = std::vector<double>(stages[s].size(), -1.0);
  std::vector<size_t> next_compute(p, 0), next_group(p, 0);
  std::vector<double> compute_free(p, 0), transfer_free(p, 0);
  // The latest end of the steps in `list`, or -1 when one has not ended.
  const auto ended = [&](size_t s, const std::vector<size_t>& list) {
    double time = 0;
    for (size_t i : list) {
      if (end[s][i] < 0) return -1.0;
      time = std::max(time, end[s][i]);
    }
    return time;
  };
  const auto advance = [&](size_t s) {
    const StageSchedule& steps = stages[s];
    size_t& c = next_compute[s];
    while (c < steps.size() && !is_compute(steps[c])) c++;
    // A compute, or an overlapped pair's two (pipeline/simulate.h): one slot once both inputs are there.
    const size_t count = c + 1 < steps.size() && steps[c + 1][0].overlapped ? 2 : 1;
    double input = c < steps.size() ? ended(s, waits[s][c]) : -1;
    if (count == 2 && input >= 0) {
      const double second = ended(s, waits[s][c + 1]);
      input = second < 0 ? -1 : std::max(input, second);
    }
    if (input >= 0) {
      const double first = compute_time(costs, steps[c][0]);
      const double slot = count == 2 ? pair_time(costs, first, compute_time(costs, steps[c + 1][0])) : first;
      for (size_t k = 0; k < count; k++, c++) {
        start[s][c] = std::max(compute_free[s], input);
        end[s][c] = start[s][c] + slot;
      }
      compute_free[s] = end[s][c - 1];
      return true;
    }
    size_t& g = next_group[s];
    while (g < steps.size() && is_compute(steps[g])) g++;
    if (g == steps.size()) return false;
    if (start[s][g] < 0) {
      const double data = ended(s, waits[s][g]);
      if (data < 0) return false;
      start[s][g] = std::max(transfer_free[s], data);
    }
    double completion = start[s][g];
    for (const auto& [peer, step] : peers[s][g]) {
      if (start[peer][step] < 0) return false;
      completion = std::max(completion, std::max(start[s][g], start[peer][step]) + costs.latency);
    }
    end[s][g] = transfer_free[s] = completion;
    g++;
    return true;
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t s = 0; s < p; s++)
      while (advance(s)) progress = true;
  }
  // Every wait above points to an earlier step of the list, and simulate ran the list step by step
  // without a deadlock: so every step ends here too.
  result.makespan = 0;
  for (size_t s = 0; s < p; s++)
    for (double time : end[s]) {
      if (time < 0) throw std::logic_error("simulate_transfer_stream: a step never ran");
      result.makespan = std::max(result.makespan, time);
    }
  for (StageSimulation& stage : result.stages)
    stage.idle_share = result.makespan > 0 ? 1 - stage.busy / result.makespan : 0;
  result.start_time = start;
  result.end_time = end;
  return result;
}
