// PipeDream's asynchronous pipeline as data (pipeline/pipedream.h): the rule's weight versions,
// each stage's run-long 1F1B order with its updates, cut into steps, and its lowering to sends and
// receives that never cross a step.
#include "pipeline/pipedream.h"

#include <algorithm>
#include <map>
#include <utility>
#include <stdexcept>

#include "pipeline/schedule.h"

namespace {

int step_of_backward(int m, int microbatch) { return microbatch / m; }

// The step in which stage s runs its forward of microbatch k: F(k) follows B(k - w_s), so it is in
// the step of B(k - w_s + 1) (the first step during the warm-up).
int step_of_forward(int p, int m, int stage, int microbatch) {
  return std::max(0, microbatch - pipedream_in_flight(p, stage) + 1) / m;
}

// The step of a send or receive: the sending stage's step of the compute that produces the tensor.
int step_of_message(int p, int m, int stage, const Action& a) {
  switch (a.kind) {
    case ActionKind::send_forward: return step_of_forward(p, m, stage, a.microbatch);
    case ActionKind::recv_forward: return step_of_forward(p, m, stage - 1, a.microbatch);
    default: return step_of_backward(m, a.microbatch);
  }
}

// Stage s's order for the whole run, not cut into steps. An update follows the backward that
// completes it, except with vertical sync, where update v waits for the stage's first use of
// version v, a forward, or for the run's end when no forward uses it (the cool-down's): the
// stage's gradient of v is decided (clipped, or skipped alike everywhere) by its norm over every
// stage, stage 0's last (docs/pipeline.md, "Clipping and the non-finite guard").
std::vector<PipeDreamAction> run_order(const PipeDreamRule& rule, int p, int m, int steps, int stage) {
  const std::vector<Action> computes = one_f_one_b_order(p, m * steps, stage);
  std::vector<PipeDreamAction> order;
  int backwards = 0, applied = 0;
  const auto apply_through = [&](int version) {
    for (; applied < version; ++applied) order.push_back({PipeDreamKind::update, -1, applied + 1});
  };
  for (const Action& a : computes) {
    if (a.kind == ActionKind::forward) {
      const int version = pipedream_forward_version(rule, p, stage, a.microbatch);
      apply_through(version);
      order.push_back({PipeDreamKind::forward, a.microbatch, version});
      continue;
    }
    order.push_back({PipeDreamKind::backward, a.microbatch, pipedream_backward_version(rule, p, stage, a.microbatch)});
    if (++backwards % rule.update_every == 0 && !rule.vertical_sync) apply_through(backwards / rule.update_every);
  }
  apply_through(backwards / rule.update_every);
  return order;
}

// Stage s's actions over a run of `steps` steps without a drain, cut into steps.
std::vector<std::vector<PipeDreamAction>> steps_of_run(const PipeDreamRule& rule, int p, int m, int steps, int stage) {
  std::vector<std::vector<PipeDreamAction>> cut(steps);
  const std::vector<PipeDreamAction> order = run_order(rule, p, m, steps, stage);
  // The cut: after B((t + 1) m - 1), or after its update when that follows it (K divides m); with
  // vertical sync a stage past 0 applies that update in the next step, at its first use.
  const auto completes = [&](size_t i) {  // order[i] is the update its predecessor completes
    return i > 0 && order[i].kind == PipeDreamKind::update && order[i - 1].kind == PipeDreamKind::backward &&
           order[i].version * rule.update_every == order[i - 1].microbatch + 1;
  };
  int step = 0;
  for (size_t i = 0; i < order.size(); ++i) {
    cut[step].push_back(order[i]);
    const size_t last = i + 1 < order.size() && completes(i + 1) ? i + 1 : i;  // the step's last action, if it ends
    const PipeDreamAction& ender = order[completes(i) ? i - 1 : i];
    const bool ends_step = last == i && ender.kind == PipeDreamKind::backward && (ender.microbatch + 1) % m == 0;
    if (ends_step && step + 1 < steps) step++;
  }
  return cut;
}

// The lists of a run of `steps` steps without a drain, per step: [step][stage].
std::vector<std::vector<StageSchedule>> step_schedules_of_run(int p, int m, int steps) {
  const Placement ring{PlacementKind::ring, p, 1};
  std::vector<std::vector<StageSchedule>> by_step(steps, std::vector<StageSchedule>(p));
  for (int s = 0; s < p; s++) {
    int current = 0;  // the step of the last compute so far
    for (const Step& step : add_communication(one_f_one_b_order(p, m * steps, s), ring, s)) {
      if (is_compute(step)) {
        const Action& a = step[0];
        current = a.kind == ActionKind::forward ? step_of_forward(p, m, s, a.microbatch) : step_of_backward(m, a.microbatch);
        by_step[current][s].push_back(step);
        continue;
      }
      // A group goes to the step of its messages: 1F1B posts each forward's receive right after the
      // receiving stage's backward of microbatch k - w_s + 1, which is in the sender's step of F(k).
      // In a cool-down longer than a step (m < p - 1) a group can join a gradient's send of one step
      // with the next gradient's receive: it splits in two, the second part opening the next step.
      std::map<int, Step> parts;
      for (const Action& a : step) parts[step_of_message(p, m, s, a)].push_back(a);
      for (const auto& [u, part] : parts) {
        if (u < current) throw std::logic_error("pipedream: " + to_text(part) + " falls before its step");
        current = u;
        by_step[current][s].push_back(part);
      }
    }
  }
  return by_step;
}


// The parts of a run between its drains: [first step, end step) each, from step index 0.
std::vector<std::pair<int, int>> parts_of_run(int steps, const std::vector<int>& drains) {
  std::vector<std::pair<int, int>> parts;
  int first = 0;
  for (int d : drains) {
    parts.push_back({first, d});
    first = d;
  }
  parts.push_back({first, steps});
  return parts;
}

}  // namespace

void check_pipedream(const PipeDreamRule& rule, int p, int m, int steps) {
  check_pipeline_stage(p, m, 0);
  if (steps < 1) throw std::runtime_error("pipedream needs at least one step; got " + std::to_string(steps));
  if (rule.update_every < 1 || m % rule.update_every != 0)
    throw std::runtime_error("--update-every " + std::to_string(rule.update_every) + " must divide --microbatches " +
                             std::to_string(m) + " (an update may not straddle the end of a step, where checkpoints are written)");
  if (rule.vertical_sync && !rule.weight_stashing)
    throw std::runtime_error("--vertical-sync needs --weight-stashing on (a backward must find the version its forward used)");
}

void check_pipedream_drains(int steps, const std::vector<int>& drains) {
  for (size_t i = 0; i < drains.size(); ++i)
    if (drains[i] < 1 || drains[i] >= steps || (i > 0 && drains[i] <= drains[i - 1]))
      throw std::runtime_error("pipedream: a drain after step " + std::to_string(drains[i]) + " of a run of " +
                               std::to_string(steps) + " steps: drains go in order, after a step before the last");
}

std::vector<int> pipedream_drains_every(const std::vector<int>& intervals, int first_step, int steps) {
  std::vector<int> drains;
  for (int d = 1; d < steps; ++d)
    if (std::any_of(intervals.begin(), intervals.end(), [&](int every) { return every > 0 && (first_step + d) % every == 0; }))
      drains.push_back(d);
  return drains;
}

int pipedream_part_start(int m, const std::vector<int>& drains, int microbatch) {
  int start = 0;
  for (int d : drains)
    if (d * m <= microbatch) start = d * m;
  return start;
}

int pipedream_stop_drain(const PipeDreamRule& rule, int p, int m, int steps, const std::vector<int>& drains, int done) {
  // Stage 0 has run its forwards through microbatch done m + p - 2; with vertical sync the update of
  // the step's last microbatch waits for its first use, microbatch done m + p - 1's forward.
  const int before_drain = done * m + p - 1 + (rule.vertical_sync ? 1 : 0);  // microbatches the part must hold
  int drain = std::min(steps, (before_drain + m - 1) / m);
  for (int d : drains)
    if (d >= done) return std::min(drain, d);
  return drain;
}

int pipedream_in_flight(int p, int stage) { return p - stage; }

int pipedream_head_ring_size(const PipeDreamRule& rule, int p) { return (p - 2) / rule.update_every + 2; }

bool pipedream_decided_at_end(const PipeDreamRule& rule, int p, int m, int steps, int version,
                              const std::vector<int>& drains) {
  const int step = (version * rule.update_every - 1) / m;  // of the update's last microbatch, from 0
  int end = steps;                                           // of its part of the run
  for (auto it = drains.rbegin(); it != drains.rend(); ++it)
    if (*it > step) end = *it;
  return rule.vertical_sync && version * rule.update_every + p > m * end;
}

int pipedream_decisions_kept(const PipeDreamRule& rule, int p, int m) {
  const int K = rule.update_every;
  return m / K + (p + K - 1) / K + 1;
}

int pipedream_forward_version(const PipeDreamRule& rule, int p, int stage, int microbatch) {
  const int in_flight = rule.vertical_sync ? p : pipedream_in_flight(p, stage);
  return std::max(0, microbatch - in_flight + 1) / rule.update_every;
}

int pipedream_backward_version(const PipeDreamRule& rule, int p, int stage, int microbatch) {
  if (rule.weight_stashing) return pipedream_forward_version(rule, p, stage, microbatch);
  return microbatch / rule.update_every;
}

std::string to_text(const PipeDreamAction& action) {
  switch (action.kind) {
    case PipeDreamKind::forward: return "F" + std::to_string(action.microbatch) + "@" + std::to_string(action.version);
    case PipeDreamKind::backward: return "B" + std::to_string(action.microbatch) + "@" + std::to_string(action.version);
    case PipeDreamKind::update: return "U" + std::to_string(action.version);
  }
  throw std::logic_error("unknown PipeDreamKind");
}

std::string to_text(const std::vector<PipeDreamAction>& actions) {
  std::string text;
  for (const PipeDreamAction& a : actions) text += (text.empty() ? "" : " ") + to_text(a);
  return text;
}

std::vector<std::vector<PipeDreamAction>> pipedream_steps(const PipeDreamRule& rule, int p, int m, int steps,
                                                          int stage, const std::vector<int>& drains) {
  check_pipedream(rule, p, m, steps);
  check_pipedream_drains(steps, drains);
  check_pipeline_stage(p, m, stage);
  std::vector<std::vector<PipeDreamAction>> cut(steps);
  // Each part is a run of its own, its microbatches numbered on and its versions counted on.
  for (const auto& [first, end] : parts_of_run(steps, drains)) {
    const std::vector<std::vector<PipeDreamAction>> part = steps_of_run(rule, p, m, end - first, stage);
    for (int t = 0; t < end - first; ++t)
      for (PipeDreamAction a : part[t]) {
        if (a.kind != PipeDreamKind::update) a.microbatch += first * m;
        a.version += first * m / rule.update_every;
        cut[first + t].push_back(a);
      }
  }
  return cut;
}

int pipedream_versions_kept(const PipeDreamRule& rule, int p, int m, int steps, int stage,
                            const std::vector<int>& drains) {
  std::vector<PipeDreamAction> order;
  for (const auto& step : pipedream_steps(rule, p, m, steps, stage, drains)) order.insert(order.end(), step.begin(), step.end());
  // After action i, version v is held when its update has run (v = 0: from the start) and it is
  // still the current one or an action after i uses it: from born[v] to before max(born[v + 1],
  // last_use[v]). One pass over those intervals, not a search of the rest of the order per action.
  const int n = static_cast<int>(order.size());
  std::vector<int> born = {0}, last_use = {-1};
  for (int i = 0; i < n; i++) {
    if (order[i].kind == PipeDreamKind::update) {
      born.push_back(i);
      last_use.push_back(-1);
    } else {
      last_use[order[i].version] = std::max(last_use[order[i].version], i);
    }
  }
  std::vector<int> change(n + 1, 0);
  for (size_t v = 0; v < born.size(); v++) {
    change[born[v]]++;
    change[std::max(v + 1 < born.size() ? born[v + 1] : n, last_use[v])]--;
  }
  int held = 0, most = 1;
  for (int i = 0; i < n; i++) most = std::max(most, held += change[i]);
  return most;
}

int pipedream_gradients_kept(const PipeDreamRule& rule, int p, int m, int steps, int stage,
                             const std::vector<int>& drains) {
  int started = 0, applied = 0, most = 1;  // updates with a backward run, updates applied
  for (const auto& step : pipedream_steps(rule, p, m, steps, stage, drains))
    for (const PipeDreamAction& a : step) {
      if (a.kind == PipeDreamKind::update) applied = a.version;
      if (a.kind == PipeDreamKind::backward) started = a.microbatch / rule.update_every + 1;
      most = std::max(most, started - applied);
    }
  return most;
}

std::vector<std::vector<StageSchedule>> pipedream_step_schedules(int p, int m, int steps,
                                                                const std::vector<int>& drains) {
  check_pipedream({}, p, m, steps);
  check_pipedream_drains(steps, drains);
  std::vector<std::vector<StageSchedule>> by_step(steps);
  for (const auto& [first, end] : parts_of_run(steps, drains)) {
    std::vector<std::vector<StageSchedule>> part = step_schedules_of_run(p, m, end - first);
    for (int t = 0; t < end - first; ++t) {
      for (StageSchedule& stage : part[t])
        for (Step& step : stage)
          for (Action& a : step) a.microbatch += first * m;
      by_step[first + t] = std::move(part[t]);
    }
  }
  return by_step;
}

std::vector<StageSchedule> pipedream_run_schedules(int p, int m, int steps, const std::vector<int>& drains) {
  std::vector<StageSchedule> run(p);
  for (const std::vector<StageSchedule>& step : pipedream_step_schedules(p, m, steps, drains))
    for (int s = 0; s < p; s++) run[s].insert(run[s].end(), step[s].begin(), step[s].end());
  return run;
}

std::string format_pipedream(const PipeDreamRule& rule, int p, int m, int steps, const std::vector<int>& drains) {
  std::vector<std::vector<std::vector<PipeDreamAction>>> stages;  // [stage][step]
  size_t width = 0;
  for (int s = 0; s < p; s++) {
    stages.push_back(pipedream_steps(rule, p, m, steps, s, drains));
    for (const auto& step : stages.back())
      for (const PipeDreamAction& a : step) width = std::max(width, to_text(a).size());
  }
  const std::string label = "stage " + std::to_string(p - 1);
  std::string text;
  for (int t = 0; t < steps; t++) {
    text += "step " + std::to_string(t + 1) + ":\n";
    for (int s = 0; s < p; s++) {
      std::string row = "stage " + std::to_string(s);
      row.resize(label.size(), ' ');
      row += " |";
      for (const PipeDreamAction& a : stages[s][t]) {
        std::string cell = to_text(a);
        cell.resize(width, ' ');
        row += " " + cell;
      }
      while (!row.empty() && row.back() == ' ') row.pop_back();
      text += row + "\n";
    }
  }
  return text;
}
