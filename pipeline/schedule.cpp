// Schedules as data (pipeline/schedule.h): the text form, the placements, the compute orders of
// afab, 1f1b and interleaved (the zero-bubble ones are in zero_bubble.cpp), the lowering pass that
// adds the sends and receives in groups, and the printed grid.
#include "pipeline/schedule.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <sstream>
#include <stdexcept>

#include "pipeline/zero_bubble.h"

namespace {

Action forward(int microbatch, int chunk = 0) { return {ActionKind::forward, microbatch, chunk}; }
Action backward(int microbatch, int chunk = 0) { return {ActionKind::backward, microbatch, chunk}; }

// "F3", "F3.1": chunk 0 is left out.
std::string name(char kind, int microbatch, int chunk) {
  return kind + std::to_string(microbatch) + (chunk == 0 ? "" : "." + std::to_string(chunk));
}

// Parses "[s|r]{F|B}<microbatch>[.<chunk>]" or "{I|W}<microbatch>[.<chunk>]" into (prefix, kind
// letter, microbatch, chunk).
bool parse_simple(const std::string& text, char& prefix, char& kind, int& microbatch, int& chunk) {
  size_t i = 0;
  prefix = (i < text.size() && (text[i] == 's' || text[i] == 'r')) ? text[i++] : ' ';
  if (i >= text.size()) return false;
  const bool transfer_kind = text[i] == 'F' || text[i] == 'B';
  if (!transfer_kind && !(prefix == ' ' && (text[i] == 'I' || text[i] == 'W'))) return false;
  kind = text[i++];
  auto number = [&](int& value) {
    const size_t begin = i;
    while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])) && i - begin < 9) i++;
    if (i == begin) return false;
    value = std::stoi(text.substr(begin, i - begin));
    return true;
  };
  if (!number(microbatch)) return false;
  chunk = 0;
  if (i < text.size() && text[i] == '.') {
    i++;
    if (!number(chunk)) return false;
  }
  return i == text.size();
}

std::string pad(const std::string& text, size_t width) { return text + std::string(width - text.size(), ' '); }

}  // namespace

void check_pipeline_stage(int p, int m, int stage) {
  if (p < 1) throw std::runtime_error("--pp " + std::to_string(p) + " must be at least 1");
  if (m < 1) throw std::runtime_error("--microbatches " + std::to_string(m) + " must be at least 1");
  if (stage < 0 || stage >= p)
    throw std::runtime_error("stage " + std::to_string(stage) + " is outside [0, " + std::to_string(p) + ")");
}

int Placement::virtual_stage(int stage, int chunk) const {
  if (kind == PlacementKind::ring) return chunk * p + stage;
  return chunk == 0 ? stage : 2 * p - 1 - stage;
}

int Placement::stage_of(int vs) const {
  if (kind == PlacementKind::ring) return vs % p;
  return vs < p ? vs : 2 * p - 1 - vs;
}

int Placement::chunk_of(int vs) const {
  if (kind == PlacementKind::ring) return vs / p;
  return vs < p ? 0 : 1;
}

Placement placement_of(ScheduleKind kind, int p, int v) {
  if (kind == ScheduleKind::zb_v) return {PlacementKind::v_shape, p, 2};
  return {PlacementKind::ring, p, v};
}

std::string placement_name(PlacementKind kind) { return kind == PlacementKind::ring ? "ring" : "v"; }

bool is_compute(const Action& a) {
  return a.kind == ActionKind::forward || a.kind == ActionKind::backward || a.kind == ActionKind::backward_input ||
         a.kind == ActionKind::backward_weight;
}
bool is_compute(const Step& step) { return step.size() == 1 && is_compute(step[0]); }
bool is_send(const Action& a) { return a.kind == ActionKind::send_forward || a.kind == ActionKind::send_backward; }
bool computes_input_gradient(ActionKind kind) {
  return kind == ActionKind::backward || kind == ActionKind::backward_input;
}

std::string to_text(const Action& a) {
  switch (a.kind) {
    case ActionKind::forward: return name('F', a.microbatch, a.chunk);
    case ActionKind::backward: return name('B', a.microbatch, a.chunk);
    case ActionKind::backward_input: return name('I', a.microbatch, a.chunk);
    case ActionKind::backward_weight: return name('W', a.microbatch, a.chunk);
    case ActionKind::recv_forward: return "r" + name('F', a.microbatch, a.chunk);
    case ActionKind::send_forward: return "s" + name('F', a.microbatch, a.chunk);
    case ActionKind::recv_backward: return "r" + name('B', a.microbatch, a.chunk);
    case ActionKind::send_backward: return "s" + name('B', a.microbatch, a.chunk);
  }
  throw std::logic_error("unknown ActionKind");
}

std::string to_text(const Step& step) {
  std::string text;
  for (const Action& action : step) text += (text.empty() ? "" : "+") + to_text(action);
  return text;
}

std::string to_text(const StageSchedule& steps) {
  std::string text;
  for (const Step& step : steps) text += (text.empty() ? "" : " ") + to_text(step);
  return text;
}

Action parse_action(const std::string& text) {
  char prefix, kind;
  int microbatch, chunk;
  if (!parse_simple(text, prefix, kind, microbatch, chunk))
    throw std::runtime_error("'" + text + "' is not a schedule action (e.g. F3, B3.1, I3, W3.1, rF3, sB3)");
  if (kind == 'I') return {ActionKind::backward_input, microbatch, chunk};
  if (kind == 'W') return {ActionKind::backward_weight, microbatch, chunk};
  const bool f = kind == 'F';
  const ActionKind kinds[3] = {f ? ActionKind::forward : ActionKind::backward,
                               f ? ActionKind::recv_forward : ActionKind::recv_backward,
                               f ? ActionKind::send_forward : ActionKind::send_backward};
  return {kinds[prefix == ' ' ? 0 : prefix == 'r' ? 1 : 2], microbatch, chunk};
}

Step parse_step(const std::string& text) {
  Step step;
  for (size_t begin = 0, plus;; begin = plus + 1) {
    plus = text.find('+', begin);
    const std::string part = text.substr(begin, plus == std::string::npos ? plus : plus - begin);
    char prefix, kind;
    int microbatch, chunk;
    if (!parse_simple(part, prefix, kind, microbatch, chunk))
      throw std::runtime_error("'" + text + "' is not a schedule step (e.g. F3, B3.1, I3, W3, rF3, sF3+rB1)");
    step.push_back(parse_action(part));
    if (plus == std::string::npos) break;
  }
  if (step.size() > 1 && std::any_of(step.begin(), step.end(), [](const Action& a) { return is_compute(a); }))
    throw std::runtime_error("'" + text + "' groups a compute action with others (F, B, I and W are steps of their own)");
  return step;
}

StageSchedule parse_schedule(const std::string& text) {
  std::istringstream tokens(text);
  StageSchedule steps;
  for (std::string token; tokens >> token;) steps.push_back(parse_step(token));
  return steps;
}

namespace {

const ScheduleKind kAllKinds[] = {ScheduleKind::afab,  ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                  ScheduleKind::zb_h1, ScheduleKind::zb_h2,       ScheduleKind::zb_v};

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) {
  std::string known;
  for (ScheduleKind kind : kAllKinds) {
    if (schedule_name(kind) == name) return kind;
    known += (known.empty() ? "" : ", ") + schedule_name(kind);
  }
  throw std::runtime_error("unknown schedule '" + name + "' (use " + known + ")");
}

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::afab: return "afab";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
    case ScheduleKind::zb_h2: return "zb-h2";
    case ScheduleKind::zb_v: return "zb-v";
  }
  throw std::logic_error("unknown ScheduleKind");
}

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_h2 || kind == ScheduleKind::zb_v;
}

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

void check_interleaved(int p, int m, int v, int stage) {
  check_pipeline_stage(p, m, stage);
  if (v < 1) throw std::runtime_error("--virtual-stages " + std::to_string(v) + " must be at least 1");
  if (m < p || m % p != 0) {
    const std::string fix = m < p ? std::to_string(p)
                                  : std::to_string(m / p * p) + " or " + std::to_string((m / p + 1) * p);
    throw std::runtime_error("the interleaved schedule needs --microbatches to be a multiple of --pp " +
                             std::to_string(p) + " and at least " + std::to_string(p) + "; got " +
                             std::to_string(m) + ": use " + fix);
  }
}

int interleaved_warmup(int p, int m, int v, int stage) {
  check_interleaved(p, m, v, stage);
  return m == p ? m * v : std::min(m * v, 2 * (p - stage - 1) + (v - 1) * p);
}

// Megatron-LM's forward_backward_pipelining_with_interleaving: the k-th forward of a stage
// runs chunk (k mod pv) / p on microbatch (k / pv) p + k mod p, i.e. groups of p microbatches
// go through chunk 0, then chunk 1, ...; backwards take the chunks in reverse.
std::vector<Action> interleaved_order(int p, int m, int v, int stage) {
  const int total = m * v;
  const int warmup = interleaved_warmup(p, m, v, stage);
  auto microbatch_of = [&](int k) { return k / (p * v) * p + k % p; };
  auto chunk_of = [&](int k) { return k % (p * v) / p; };
  std::vector<Action> order;
  for (int k = 0; k < warmup; k++) order.push_back(forward(microbatch_of(k), chunk_of(k)));
  for (int k = 0; k < total - warmup; k++) {  // steady state: one forward, one backward
    order.push_back(forward(microbatch_of(k + warmup), chunk_of(k + warmup)));
    order.push_back(backward(microbatch_of(k), v - 1 - chunk_of(k)));
  }
  for (int k = total - warmup; k < total; k++) order.push_back(backward(microbatch_of(k), v - 1 - chunk_of(k)));
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

int chunks_per_stage(ScheduleKind kind, int v) { return kind == ScheduleKind::zb_v ? 2 : v; }

namespace {

void check_chunks(ScheduleKind kind, int v) {
  if (kind != ScheduleKind::interleaved && v != 1 && !(kind == ScheduleKind::zb_v && v == 2))
    throw std::runtime_error("--virtual-stages " + std::to_string(v) + " needs --schedule interleaved (" +
                             schedule_name(kind) +
                             (kind == ScheduleKind::zb_v ? " runs two chunks per stage)" : " runs one chunk per stage)"));
}

// The zero-bubble schedules come as compute orders only: all stages are lowered together.
std::vector<StageSchedule> zero_bubble_schedules(ScheduleKind kind, int p, int m) {
  check_pipeline_stage(p, m, 0);
  std::vector<std::vector<Action>> orders;
  for (int s = 0; s < p; s++)
    orders.push_back(kind == ScheduleKind::zb_h1   ? zb_h1_order(p, m, s)
                     : kind == ScheduleKind::zb_h2 ? zb_h2_order(p, m, s)
                                                   : zb_v_order(p, m, s));
  return add_communication_in_time_order(orders, placement_of(kind, p, 1));
}

}  // namespace

StageSchedule make_schedule(ScheduleKind kind, int p, int m, int v, int stage) {
  check_chunks(kind, v);
  if (splits_backward(kind)) {
    check_pipeline_stage(p, m, stage);
    return zero_bubble_schedules(kind, p, m)[stage];
  }
  const Placement placement = placement_of(kind, p, v);
  switch (kind) {
    case ScheduleKind::afab: return add_communication(afab_order(p, m, stage), placement, stage);
    case ScheduleKind::one_f_one_b: return add_communication(one_f_one_b_order(p, m, stage), placement, stage);
    case ScheduleKind::interleaved:
      return add_communication(interleaved_order(p, m, v, stage), placement, stage,
                               ReceivePosting::after_previous_of_direction);
    default: throw std::logic_error("make_schedule: " + schedule_name(kind));
  }
}

std::vector<StageSchedule> make_all_schedules(ScheduleKind kind, int p, int m, int v) {
  check_chunks(kind, v);
  if (splits_backward(kind)) return zero_bubble_schedules(kind, p, m);
  std::vector<StageSchedule> stages;
  for (int stage = 0; stage < p; stage++) stages.push_back(make_schedule(kind, p, m, v, stage));
  return stages;
}

PipelineSchedule make_pipeline_schedule(ScheduleKind kind, int p, int m, int v) {
  return {placement_of(kind, p, v), make_all_schedules(kind, p, m, v)};
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
  auto cell = [&](size_t stage, size_t step) {
    const std::string text = to_text(stages[stage][step]);
    const bool marked = stage < marked_steps.size() && marked_steps[stage] == static_cast<int>(step);
    return marked ? ">" + text + "<" : text;
  };
  size_t width = 0;
  for (size_t s = 0; s < stages.size(); s++)
    for (size_t i = 0; i < stages[s].size(); i++) width = std::max(width, cell(s, i).size());
  const std::string label_width = "stage " + std::to_string(stages.empty() ? 0 : stages.size() - 1);
  std::string grid;
  for (size_t s = 0; s < stages.size(); s++) {
    std::string row = pad("stage " + std::to_string(s), label_width.size()) + " |";
    for (size_t i = 0; i < stages[s].size(); i++) row += " " + pad(cell(s, i), width);
    while (!row.empty() && row.back() == ' ') row.pop_back();
    grid += row + "\n";
  }
  return grid;
}
