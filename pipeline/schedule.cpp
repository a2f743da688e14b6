// Schedules as data (pipeline/schedule.h): the compute orders of afab and 1f1b (interleaved's is in
// interleaved.cpp, the zero-bubble ones in zero_bubble.cpp, the actions and their text form in action.cpp), the
// lowering pass that adds the sends and receives in groups, and the printed grid.
#include "pipeline/schedule.h"

#include <algorithm>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "pipeline/controllable_memory.h"
#include "pipeline/dual_pipe_v.h"
#include "pipeline/interleaved.h"
#include "pipeline/looped_bfs.h"
#include "pipeline/interleaved_zero_bubble.h"
#include "pipeline/zero_bubble.h"

namespace {

Action forward(int microbatch, int chunk = 0) { return {ActionKind::forward, microbatch, chunk}; }
Action backward(int microbatch, int chunk = 0) { return {ActionKind::backward, microbatch, chunk}; }

std::string pad(const std::string& text, size_t width) { return text + std::string(width - text.size(), ' '); }

}  // namespace

std::vector<Action> afab_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  std::vector<Action> order;
  for (int i = 0; i < m; i++) order.push_back(forward(i));
  for (int i = 0; i < m; i++) order.push_back(backward(i));
  return order;
}

std::vector<Action> one_f_one_b_order(int p, int m, int stage) {
  check_pipeline_stage(p, m, stage);
  const int warmup = std::min(p - stage - 1, m);  // forwards in flight before the first backward
  std::vector<Action> order;
  int next_forward = 0, next_backward = 0;
  for (int i = 0; i < warmup; i++) order.push_back(forward(next_forward++));
  while (next_forward < m) {  // steady state: one forward, one backward
    order.push_back(forward(next_forward++));
    order.push_back(backward(next_backward++));
  }
  while (next_backward < m) order.push_back(backward(next_backward++));  // cool-down
  return order;
}

StageSchedule add_communication(const std::vector<Action>& compute, const Placement& placement, int stage,
                                ReceivePosting posting) {
  const size_t n = compute.size();
  const int last_virtual_stage = placement.virtual_stages() - 1;
  // Whether virtual stage `neighbour` exists and lives on another stage.
  auto remote = [&](int neighbour) {
    return neighbour >= 0 && neighbour <= last_virtual_stage && placement.stage_of(neighbour) != stage;
  };
  std::vector<Step> sends(n + 1), receives(n + 1);  // by group point: g sits before compute g
  std::optional<size_t> previous_forward, previous_backward;  // the last compute of each direction so far
  for (size_t i = 0; i < n; i++) {
    const Action& a = compute[i];
    if (a.kind == ActionKind::backward_weight) continue;  // W neither receives nor sends
    const int virtual_stage = placement.virtual_stage(stage, a.chunk);
    const bool is_forward = a.kind == ActionKind::forward;
    std::optional<size_t>& previous = is_forward ? previous_forward : previous_backward;
    if (remote(is_forward ? virtual_stage - 1 : virtual_stage + 1)) {
      const bool early = posting == ReceivePosting::after_previous_of_direction && previous;
      receives[early ? *previous + 1 : i].push_back(
          {is_forward ? ActionKind::recv_forward : ActionKind::recv_backward, a.microbatch, a.chunk});
    }
    if (remote(is_forward ? virtual_stage + 1 : virtual_stage - 1))
      sends[i + 1].push_back({is_forward ? ActionKind::send_forward : ActionKind::send_backward, a.microbatch, a.chunk});
    previous = i;
  }
  StageSchedule steps;
  for (size_t g = 0; g <= n; g++) {
    Step group = sends[g];
    group.insert(group.end(), receives[g].begin(), receives[g].end());
    if (!group.empty()) steps.push_back(group);
    if (g < n) steps.push_back({compute[g]});
  }
  return steps;
}

int chunks_per_stage(ScheduleKind kind, int v) { return placement_of(kind, 1, v).kind == PlacementKind::v_shape ? 2 : v; }

namespace {

void check_chunks(ScheduleKind kind, int v, int group) {
  if (kind != ScheduleKind::interleaved && group != 0)
    throw std::runtime_error("--microbatch-group " + std::to_string(group) + " needs --schedule interleaved (" +
                             schedule_name(kind) + " has no microbatch groups)");
  if (kind == ScheduleKind::zb_interleaved) return;  // v >= 2, checked with its order
  const bool v_shape = placement_of(kind, 1, v).kind == PlacementKind::v_shape;
  if (kind != ScheduleKind::interleaved && kind != ScheduleKind::looped_bfs && v != 1 && !(v_shape && v == 2))
    throw std::runtime_error("--virtual-stages " + std::to_string(v) + " needs --schedule interleaved (" +
                             schedule_name(kind) +
                             (v_shape ? " runs two chunks per stage)" : " runs one chunk per stage)"));
}

// The zero-bubble schedules come as compute orders only: all stages are lowered together.
std::vector<StageSchedule> zero_bubble_schedules(ScheduleKind kind, int p, int m, int v) {
  check_pipeline_stage(p, m, 0);
  if (kind == ScheduleKind::zb_interleaved) {
    std::vector<std::vector<Action>> orders;
    for (int s = 0; s < p; s++) orders.push_back(zb_interleaved_order(p, m, v, s));
    return add_communication_in_time_order(orders, placement_of(kind, p, v));
  }
  if (kind == ScheduleKind::v_half || kind == ScheduleKind::v_min)
    return add_communication_in_time_order(controllable_memory_orders(kind, p, m), placement_of(kind, p, 1));
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < p; s++)
    orders.push_back(kind == ScheduleKind::zb_h1   ? zb_h1_order(p, m, s)
                     : kind == ScheduleKind::zb_h2 ? zb_h2_order(p, m, s)
                                                   : zb_v_order(p, m, s));
  return add_communication_in_time_order(orders, placement_of(kind, p, 1));
}

// Interleaved with microbatch groups larger than p (pipeline/interleaved.h) cannot post each receive
// after the previous compute of its direction: the last stage sends chunk 0's first outputs round
// the ring N - p forwards before stage 0 posts their receives, and on 2 stages an activation and a
// gradient cross between the same two stages in opposite orders (tests/interleaved_test.cu's
// deadlock sweep found both). Megatron's isend and irecv do not wait for each other; our groups
// would, so these orders are lowered in time order, as the zero-bubble ones are. So is looped BFS,
// whose last stage sends each chunk's outputs round the ring m forwards before stage 0 takes them.
// DualPipeV (pipeline/dual_pipe_v.h) comes as compute orders only, as the zero-bubble ones do.
bool lowered_in_time_order(ScheduleKind kind, int p, int group) {
  if (kind == ScheduleKind::looped_bfs || kind == ScheduleKind::dual_pipe_v) return true;
  return kind == ScheduleKind::interleaved && interleaved_group(p, group) != p;
}

std::vector<StageSchedule> schedules_in_time_order(ScheduleKind kind, int p, int m, int v, int group) {
  check_pipeline_stage(p, m, 0);
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < p; s++)
    orders.push_back(kind == ScheduleKind::looped_bfs    ? looped_bfs_order(p, m, v, s)
                     : kind == ScheduleKind::dual_pipe_v ? dual_pipe_v_order(p, m, s)
                                                         : interleaved_order(p, m, v, s, group));
  return add_communication_in_time_order(orders, placement_of(kind, p, v));
}

}  // namespace

StageSchedule make_schedule(ScheduleKind kind, int p, int m, int v, int stage, int group) {
  check_chunks(kind, v, group);
  if (splits_backward(kind)) {
    check_pipeline_stage(p, m, stage);
    return zero_bubble_schedules(kind, p, m, v)[stage];
  }
  if (lowered_in_time_order(kind, p, group)) {
    check_pipeline_stage(p, m, stage);
    return schedules_in_time_order(kind, p, m, v, group)[stage];
  }
  const Placement placement = placement_of(kind, p, v);
  switch (kind) {
    case ScheduleKind::afab: return add_communication(afab_order(p, m, stage), placement, stage);
    case ScheduleKind::one_f_one_b: return add_communication(one_f_one_b_order(p, m, stage), placement, stage);
    case ScheduleKind::interleaved:
      return add_communication(interleaved_order(p, m, v, stage, group), placement, stage,
                               ReceivePosting::after_previous_of_direction);
    default: throw std::logic_error("make_schedule: " + schedule_name(kind));
  }
}

std::vector<StageSchedule> make_all_schedules(ScheduleKind kind, int p, int m, int v, int group) {
  check_chunks(kind, v, group);
  if (splits_backward(kind)) return zero_bubble_schedules(kind, p, m, v);
  if (lowered_in_time_order(kind, p, group)) return schedules_in_time_order(kind, p, m, v, group);
  std::vector<StageSchedule> stages;
  for (int stage = 0; stage < p; stage++) stages.push_back(make_schedule(kind, p, m, v, stage, group));
  return stages;
}

PipelineSchedule make_pipeline_schedule(ScheduleKind kind, int p, int m, int v, int group) {
  return {placement_of(kind, p, v), make_all_schedules(kind, p, m, v, group)};
}

bool has_overlapped_pairs(const PipelineSchedule& schedule) {
  for (const StageSchedule& steps : schedule.stages)
    for (const Step& step : steps)
      if (step.front().overlapped) return true;
  return false;
}

std::vector<Action> compute_actions(const StageSchedule& steps) {
  std::vector<Action> compute;
  for (const Step& step : steps)
    if (is_compute(step)) compute.push_back(step[0]);
  return compute;
}

std::string format_grid(const std::vector<StageSchedule>& stages) {
  std::vector<StageSchedule> compute(stages.size());
  for (size_t s = 0; s < stages.size(); s++)
    for (const Action& a : compute_actions(stages[s])) compute[s].push_back({a});
  return format_grid_with_communication(compute);
}

std::string format_grid_with_communication(const std::vector<StageSchedule>& stages,
                                           const std::vector<int>& marked_steps) {
  // One cell per step, an overlapped pair's two computes in one ("F7&B3.1").
  std::vector<std::vector<std::string>> cells(stages.size());
  size_t width = 0;
  for (size_t s = 0; s < stages.size(); s++)
    for (size_t i = 0; i < stages[s].size(); i++) {
      const std::string text = to_text(stages[s][i]);
      const bool marked = s < marked_steps.size() && marked_steps[s] == static_cast<int>(i);
      if (stages[s][i].front().overlapped && !cells[s].empty())
        cells[s].back() += marked ? ">" + text + "<" : text;
      else
        cells[s].push_back(marked ? ">" + text + "<" : text);
      width = std::max(width, cells[s].back().size());
    }
  const std::string label_width = "stage " + std::to_string(stages.empty() ? 0 : stages.size() - 1);
  std::string grid;
  for (size_t s = 0; s < stages.size(); s++) {
    std::string row = pad("stage " + std::to_string(s), label_width.size()) + " |";
    for (const std::string& cell : cells[s]) row += " " + pad(cell, width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    grid += row + "\n";
  }
  return grid;
}
