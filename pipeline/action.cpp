// Actions, steps, kinds and placements, and their text form (pipeline/action.h).
#include "pipeline/action.h"

#include <algorithm>
#include <cctype>
#include <iterator>
#include <sstream>
#include <stdexcept>

namespace {

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
  if (kind == ScheduleKind::v_half || kind == ScheduleKind::v_min) return {PlacementKind::v_shape, p, 2};
  if (kind == ScheduleKind::dual_pipe_v) return {PlacementKind::v_shape, p, 2};
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

std::string pair_problem(const Action& first, const Action& second, PlacementKind placement) {
  const std::string pair = to_text(Action{first.kind, first.microbatch, first.chunk}) + to_text(second);
  if (placement != PlacementKind::v_shape)
    return "'" + pair + "' pairs two computes, but only a v placement overlaps them (placement v, DualPipeV)";
  if (!is_compute(first) || !is_compute(second) || first.overlapped)
    return "'" + pair + "': a pair is two computes, and only two";
  if (first.kind != ActionKind::forward || !computes_input_gradient(second.kind))
    return "'" + pair + "' is not a forward then a B or I (F3&B1.1)";
  if (first.chunk == second.chunk)
    return "'" + pair + "' runs chunk " + std::to_string(first.chunk) + " twice: a pair is one chunk's forward with the other's backward";
  return "";
}

std::string to_text(const Action& a) {
  if (a.overlapped) return "&" + to_text(Action{a.kind, a.microbatch, a.chunk});
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
  for (const Step& step : steps) text += (text.empty() || step.front().overlapped ? "" : " ") + to_text(step);
  return text;
}

Action parse_action(const std::string& text) {
  if (text.size() > 1 && text[0] == '&') {
    Action overlapped = parse_action(text.substr(1));
    if (!is_compute(overlapped)) throw std::runtime_error("'" + text + "': only a compute (F, B, I, W) overlaps");
    overlapped.overlapped = true;
    return overlapped;
  }
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
    if (!parse_simple(part.substr(part.size() > 1 && part[0] == '&'), prefix, kind, microbatch, chunk))
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
  for (std::string token; tokens >> token;)
    for (size_t begin = 0, amp;; begin = amp) {  // "F7&B3.1": the pair's steps, the second overlapped
      amp = token.find('&', begin + 1);
      steps.push_back(parse_step(token.substr(begin, amp == std::string::npos ? amp : amp - begin)));
      if (amp == std::string::npos) break;
    }
  return steps;
}

namespace {

const ScheduleKind kAllKinds[] = {ScheduleKind::afab,  ScheduleKind::one_f_one_b, ScheduleKind::interleaved,
                                  ScheduleKind::zb_h1, ScheduleKind::zb_h2,       ScheduleKind::zb_v,
                                  ScheduleKind::v_half, ScheduleKind::v_min, ScheduleKind::looped_bfs,
                                  ScheduleKind::zb_interleaved, ScheduleKind::dual_pipe_v};

}  // namespace

ScheduleKind parse_schedule_kind(const std::string& name) {
  std::string known;
  for (ScheduleKind kind : kAllKinds) {
    if (schedule_name(kind) == name) return kind;
    known += (known.empty() ? "" : ", ") + schedule_name(kind);
  }
  throw std::runtime_error("unknown schedule '" + name + "' (use " + known + ")");
}

std::vector<ScheduleKind> all_schedule_kinds() { return {std::begin(kAllKinds), std::end(kAllKinds)}; }

std::string schedule_name(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::afab: return "afab";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved: return "interleaved";
    case ScheduleKind::zb_h1: return "zb-h1";
    case ScheduleKind::zb_h2: return "zb-h2";
    case ScheduleKind::zb_v: return "zb-v";
    case ScheduleKind::v_half: return "v-half";
    case ScheduleKind::v_min: return "v-min";
    case ScheduleKind::looped_bfs: return "looped-bfs";
    case ScheduleKind::zb_interleaved: return "zb-interleaved";
    case ScheduleKind::dual_pipe_v: return "dualpipev";
  }
  throw std::logic_error("unknown ScheduleKind");
}

bool splits_backward(ScheduleKind kind) {
  return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_h2 || kind == ScheduleKind::zb_v ||
         kind == ScheduleKind::v_half || kind == ScheduleKind::v_min || kind == ScheduleKind::zb_interleaved;
}
