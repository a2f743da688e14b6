// A schedule from a file (pipeline/schedule_file.h): parsing, the checks, the lowering.
#include "pipeline/schedule_file.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <tuple>

#include "pipeline/simulate.h"

namespace {

std::string trimmed(const std::string& text) {
  const size_t begin = text.find_first_not_of(" \t\r");
  if (begin == std::string::npos) return "";
  return text.substr(begin, text.find_last_not_of(" \t\r") - begin + 1);
}

std::vector<StageSchedule> rows_of(const std::vector<std::vector<Action>>& stages) {
  std::vector<StageSchedule> rows(stages.size());
  for (size_t s = 0; s < stages.size(); s++)
    for (const Action& a : stages[s]) rows[s].push_back({a});
  return rows;
}

// An error's text ends with the grid's last row, without the newline after it.
std::string without_final_newline(std::string text) {
  while (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

[[noreturn]] void fail(const ScheduleGrid& grid, int stage, int step, const std::string& problem) {
  std::vector<int> marked(grid.stages.size(), -1);
  if (stage >= 0 && size_t(stage) < marked.size()) marked[stage] = step;
  throw std::runtime_error("schedule error: stage " + std::to_string(stage) +
                           (step >= 0 ? " step " + std::to_string(step) : "") + " " + problem + "\n" +
                           without_final_newline(format_grid_with_communication(rows_of(grid.stages), marked)));
}

// Where each compute of one stage is, by (kind, microbatch, chunk).
using Positions = std::map<std::tuple<ActionKind, int, int>, int>;

// One stage's computes: each at most once, for microbatches in [0, m) and the placement's chunks,
// each microbatch's B or I after its F and its W after its I, never both B and I; then each
// chunk's forwards and gradient-adding computes (B, W) in microbatch order.
void check_stage_order(const ScheduleGrid& grid, int s, int m, int v) {
  const std::vector<Action>& order = grid.stages[s];
  Positions at;
  for (int i = 0; i < int(order.size()); i++) {
    const Action& a = order[i];
    const std::string name = to_text(a);
    const auto same = [&](ActionKind kind) { return at.find({kind, a.microbatch, a.chunk}); };
    const auto missing = [&](ActionKind kind) { return same(kind) == at.end(); };
    if (a.microbatch >= m) fail(grid, s, i, "runs " + name + ", but --microbatches is " + std::to_string(m));
    if (a.chunk >= v)
      fail(grid, s, i, "runs " + name + ", but the " + placement_name(grid.placement) + " placement has " +
                           std::to_string(v) + (v == 1 ? " chunk" : " chunks") + " per stage");
    if (!missing(a.kind)) fail(grid, s, i, "repeats " + name);
    const std::string suffix = name.substr(1);
    if (a.kind != ActionKind::forward && a.kind != ActionKind::backward_weight && missing(ActionKind::forward))
      fail(grid, s, i, "runs " + name + " before F" + suffix);
    if (a.kind == ActionKind::backward_weight && missing(ActionKind::backward_input))
      fail(grid, s, i, "runs " + name + " before I" + suffix);
    if ((a.kind == ActionKind::backward && !missing(ActionKind::backward_input)) ||
        (a.kind == ActionKind::backward_input && !missing(ActionKind::backward)))
      fail(grid, s, i, "runs both B" + suffix + " and I" + suffix);
    at[{a.kind, a.microbatch, a.chunk}] = i;
  }
  const char* const rule = ": every microbatch's F, then B or I then W, exactly once per chunk";
  for (int c = 0; c < v; c++)
    for (int k = 0; k < m; k++) {
      const std::string suffix = to_text(Action{ActionKind::forward, k, c}).substr(1);
      const auto position = [&](ActionKind kind) {
        const auto found = at.find({kind, k, c});
        return found == at.end() ? -1 : found->second;
      };
      const int f = position(ActionKind::forward), b = position(ActionKind::backward);
      const int in = position(ActionKind::backward_input), w = position(ActionKind::backward_weight);
      if (f < 0) fail(grid, s, -1, "has no F" + suffix + rule);
      if (b < 0 && in < 0) fail(grid, s, f, "has no B" + suffix + " or I" + suffix + " after F" + suffix + rule);
      if (in >= 0 && w < 0) fail(grid, s, in, "has no W" + suffix + " after I" + suffix + rule);
    }
  // Microbatch order within each chunk, for the forwards and for the computes that add gradients.
  std::vector<int> last_forward(v, -1), last_gradient(v, -1);
  for (int i = 0; i < int(order.size()); i++) {
    const Action& a = order[i];
    if (a.kind == ActionKind::backward_input) continue;
    int& last = a.kind == ActionKind::forward ? last_forward[a.chunk] : last_gradient[a.chunk];
    if (a.microbatch < last)
      fail(grid, s, i,
           "runs " + to_text(a) + " after microbatch " + std::to_string(last) +
               "'s: each chunk's F's, and its B's and W's, run in microbatch order, so that every schedule adds "
               "the losses and gradients in the same order");
    last = a.microbatch;
  }
}

// One token of a stage line: an action, or an overlapped pair "F7&B3.1" (its second overlapped).
std::vector<Action> parse_token(const std::string& token, const std::string& where) {
  std::vector<Action> actions;
  try {
    for (size_t begin = 0, amp;; begin = amp) {
      amp = token.find('&', begin + 1);
      actions.push_back(parse_action(token.substr(begin, amp == std::string::npos ? amp : amp - begin)));
      if (amp == std::string::npos) return actions;
    }
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(where + error.what());
  }
}

}  // namespace

ScheduleGrid parse_schedule_grid(const std::string& text) {
  ScheduleGrid grid{PlacementKind::ring, {}};
  std::istringstream lines(text);
  bool placement_given = false;
  int number = 0;
  for (std::string line; std::getline(lines, line);) {
    number++;
    const std::string where = "line " + std::to_string(number) + ": ";
    const std::string content = trimmed(line.substr(0, line.find('#')));
    if (content.empty()) continue;
    std::istringstream words(content);
    std::string first;
    words >> first;
    if (first == "placement") {
      std::string name, extra;
      words >> name;
      if (placement_given || !grid.stages.empty() || (name != "ring" && name != "v") || (words >> extra))
        throw std::runtime_error(where + "'" + content + "': one line 'placement ring' or 'placement v' may come first");
      grid.placement = name == "v" ? PlacementKind::v_shape : PlacementKind::ring;
      placement_given = true;
      continue;
    }
    const size_t bar = content.find('|');
    const std::string label = "stage " + std::to_string(grid.stages.size());
    if (first != "stage" || bar == std::string::npos || trimmed(content.substr(0, bar)) != label)
      throw std::runtime_error(where + "'" + content + "' is not '" + label + " | <computes>' (stages in order)");
    std::vector<Action> order;
    std::istringstream tokens(content.substr(bar + 1));
    for (std::string token; tokens >> token;)
      for (const Action& a : parse_token(token, where)) {
        if (!is_compute(a))
          throw std::runtime_error(where + "'" + token +
                                   "' is a transfer: the file lists computes only (F, B, I, W), transfers are added");
        const std::string problem = !a.overlapped ? ""
                                    : order.empty() ? "'" + token + "' overlaps no compute before it"
                                                    : pair_problem(order.back(), a, grid.placement);
        if (!problem.empty()) throw std::runtime_error(where + problem);
        order.push_back(a);
      }
    grid.stages.push_back(order);
  }
  if (grid.stages.empty()) throw std::runtime_error("the schedule has no 'stage 0 | ...' line");
  return grid;
}

PipelineSchedule schedule_from_grid(const ScheduleGrid& grid, int p, int m) {
  if (int(grid.stages.size()) != p)
    throw std::runtime_error("the schedule has " + std::to_string(grid.stages.size()) + " stages, but the pipeline has " +
                             std::to_string(p) + " (--pp)");
  int v = 1;
  for (const std::vector<Action>& order : grid.stages)
    for (const Action& a : order) v = std::max(v, a.chunk + 1);
  if (grid.placement == PlacementKind::v_shape) v = 2;
  for (int s = 0; s < p; s++) check_stage_order(grid, s, m, v);
  const Placement placement{grid.placement, p, v};
  try {
    PipelineSchedule schedule{placement, add_communication_in_time_order(grid.stages, placement)};
    const Simulation simulation = simulate(schedule.stages, {1, 1, 1, 0}, placement.kind);
    if (!simulation.deadlock.empty()) throw std::runtime_error("schedule error: " + simulation.deadlock);
    return schedule;
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(without_final_newline(error.what()));
  }
}

std::string schedule_grid_text(const PipelineSchedule& schedule) {
  const std::string placement =
      schedule.placement.kind == PlacementKind::v_shape
          ? "placement v  # stage s holds virtual stages s (chunk 0) and " + std::to_string(2 * schedule.placement.p - 1) +
                " - s (chunk 1)\n"
          : "";
  return placement + format_grid(schedule.stages);
}
