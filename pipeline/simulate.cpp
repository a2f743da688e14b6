// The dry-run simulator (pipeline/simulate.h). Each stage advances as far as it can; a
// message's completion time depends only on the two post times, so the order in which
// stages are advanced does not change the result.
#include "pipeline/simulate.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <stdexcept>
#include <utility>

namespace {

enum class Tensor { activation, gradient };

// A tensor crossing between virtual stages: the activation out of virtual stage `from`
// into from + 1, or the gradient out of `from` into from - 1.
struct Message {
  Tensor tensor;
  int from;
  int microbatch;
  auto operator<=>(const Message&) const = default;
};

// One posted send or receive of a channel (a, b): sends from stage a to stage b.
struct Posted {
  Message message;
  double time;
  int stage;  // the stage that posted it
  size_t step;
};

Message message_of(const Action& a, int stage, const Placement& layout) {
  const int vs = layout.virtual_stage(stage, a.chunk);
  switch (a.kind) {
    case ActionKind::send_forward: return {Tensor::activation, vs, a.microbatch};
    case ActionKind::recv_forward: return {Tensor::activation, vs - 1, a.microbatch};
    case ActionKind::send_backward: return {Tensor::gradient, vs, a.microbatch};
    case ActionKind::recv_backward: return {Tensor::gradient, vs + 1, a.microbatch};
    default: throw std::logic_error("not a send or receive");
  }
}

int destination(const Message& message) { return message.from + (message.tensor == Tensor::activation ? 1 : -1); }

std::string describe(const Message& message, const Placement& layout) {
  const int to = destination(message);
  return std::string(message.tensor == Tensor::activation ? "the activation" : "the gradient") + " of microbatch " +
         std::to_string(message.microbatch) + " from stage " + std::to_string(layout.stage_of(message.from)) +
         " chunk " + std::to_string(layout.chunk_of(message.from)) + " to stage " +
         std::to_string(layout.stage_of(to)) + " chunk " + std::to_string(layout.chunk_of(to));
}

struct StageState {
  size_t step = 0;
  double clock = 0;
  std::vector<std::pair<std::pair<int, int>, size_t>> posted;  // the current group: (channel, index) per action
  double busy = 0;
  int in_flight = 0, pending = 0;
  int peak_in_flight = 0, peak_pending = 0;
  std::vector<int> chunk_in_flight, chunk_pending;            // per chunk, now
  std::vector<int> chunk_peak_in_flight, chunk_peak_pending;  // per chunk, the most
  // (microbatch, chunk) through F; through B or I (the input gradient); through I (split); through W.
  std::set<std::pair<int, int>> forwarded, backwarded, split, weighted;
  std::set<Message> received;
};

class Simulator {
 public:
  Simulator(const std::vector<StageSchedule>& stages, const StepCosts& costs, PlacementKind placement)
      : stages_(stages), costs_(costs), layout_{placement, static_cast<int>(stages.size()), 1}, state_(stages.size()) {
    for (const StageSchedule& steps : stages)
      for (const Step& step : steps)
        for (const Action& a : step) layout_.v = std::max(layout_.v, a.chunk + 1);
    if (placement == PlacementKind::v_shape) {
      if (layout_.v > 2) fail(0, "has chunk " + std::to_string(layout_.v - 1) + ", but the v placement holds two");
      layout_.v = 2;
    }
    for (StageState& state : state_)
      state.chunk_in_flight = state.chunk_pending = state.chunk_peak_in_flight = state.chunk_peak_pending =
          std::vector<int>(layout_.v, 0);
  }

  Simulation run() {
    Simulation result{0, {}, {}, {}, {}, ""};
    for (const StageSchedule& steps : stages_) {
      result.start_time.emplace_back(steps.size(), -1.0);
      result.end_time.emplace_back(steps.size(), -1.0);
    }
    start_time_ = &result.start_time;
    end_time_ = &result.end_time;
    for (bool progress = true; progress;) {
      progress = false;
      for (int s = 0; s < layout_.p; s++)
        while (advance(s)) progress = true;
    }
    for (const StageState& state : state_) result.makespan = std::max(result.makespan, state.clock);
    for (const StageState& state : state_)
      result.stages.push_back({state.busy, result.makespan > 0 ? 1 - state.busy / result.makespan : 0,
                               state.peak_in_flight, state.peak_pending, state.chunk_peak_in_flight,
                               state.chunk_peak_pending});
    result.messages = message_links();
    result.deadlock = deadlock_report();
    return result;
  }

 private:
  // Runs stage s's current step if it can; false when the stage is finished or waiting.
  bool advance(int s) {
    StageState& state = state_[s];
    if (state.step == stages_[s].size()) return false;
    const Step& step = stages_[s][state.step];
    if (step.empty()) fail(s, "is an empty step");
    if (is_compute(step)) {  // a compute, or an overlapped pair's two in one slot (pipeline/simulate.h)
      const size_t count = state.step + 1 < stages_[s].size() && stages_[s][state.step + 1][0].overlapped ? 2 : 1;
      const double start = state.clock;
      double slot = compute(s, step[0]);
      if (count == 2) slot = pair_time(costs_, slot, compute(s, stages_[s][state.step + 1][0]));
      state.clock += slot;
      state.busy += slot;
      for (size_t k = 0; k < count; k++, state.step++) {
        (*start_time_)[s][state.step] = start;
        (*end_time_)[s][state.step] = state.clock;
      }
      return true;
    }
    if (state.posted.empty()) {
      (*start_time_)[s][state.step] = state.clock;
      for (const Action& a : step) post(s, a);
    }
    double completion = state.clock;
    for (size_t i = 0; i < step.size(); i++) {
      const auto& [channel, index] = state.posted[i];
      const std::vector<Posted>& others = (is_send(step[i]) ? recvs_ : sends_)[channel];
      if (index >= others.size()) return false;
      const Posted& mine = (is_send(step[i]) ? sends_ : recvs_)[channel][index];
      if (!(others[index].message == mine.message)) {
        const Posted& send = is_send(step[i]) ? mine : others[index];
        const Posted& recv = is_send(step[i]) ? others[index] : mine;
        fail(recv.stage, "receives " + describe(recv.message, layout_) + ", but the matching send of stage " +
                             std::to_string(send.stage) + " (step " + std::to_string(send.step) + ") carries " +
                             describe(send.message, layout_), static_cast<int>(recv.step));
      }
      completion = std::max(completion, std::max(mine.time, others[index].time) + costs_.latency);
    }
    for (const Action& a : step) {
      if (is_send(a)) continue;
      state.received.insert(message_of(a, s, layout_));
      if (a.kind == ActionKind::recv_forward) take_slot(state, a.chunk);
    }
    state.clock = completion;
    (*end_time_)[s][state.step] = completion;
    state.posted.clear();
    state.step++;
    return true;
  }

  // Checks and counts compute a on stage s; returns its time.
  double compute(int s, const Action& a) {
    StageState& state = state_[s];
    const std::pair<int, int> key{a.microbatch, a.chunk};
    const int vs = layout_.virtual_stage(s, a.chunk);
    double cost = 0;
    if (a.kind == ActionKind::forward) {
      if (state.forwarded.count(key)) fail(s, "repeats " + to_text(a));
      if (vs > 0 && !has_input(s, {Tensor::activation, vs - 1, a.microbatch}, true))
        fail(s, "runs " + to_text(a) + " before receiving its input");
      state.forwarded.insert(key);
      cost = compute_time(costs_, a);
      if (vs == 0) take_slot(state, a.chunk);
      if (vs < layout_.virtual_stages() - 1 && layout_.stage_of(vs + 1) == s)
        take_slot(state, layout_.chunk_of(vs + 1));  // the local hand-over
    } else if (a.kind == ActionKind::backward_weight) {
      if (state.weighted.count(key)) fail(s, "repeats " + to_text(a));
      if (!state.split.count(key)) fail(s, "runs " + to_text(a) + " before its I" + to_text(a).substr(1));
      state.weighted.insert(key);
      cost = compute_time(costs_, a);
      state.pending--;
      state.chunk_pending[a.chunk]--;
    } else {
      const bool split = a.kind == ActionKind::backward_input;
      if (!state.forwarded.count(key)) fail(s, "runs " + to_text(a) + " before its forward");
      if (state.backwarded.count(key))
        fail(s, std::string(state.split.count(key) == split ? "repeats " : "runs both B and I of ") + to_text(a));
      if (vs < layout_.virtual_stages() - 1 && !has_input(s, {Tensor::gradient, vs + 1, a.microbatch}, false))
        fail(s, "runs " + to_text(a) + " before receiving its output gradient");
      state.backwarded.insert(key);
      cost = compute_time(costs_, a);
      state.in_flight--;
      state.chunk_in_flight[a.chunk]--;
      if (split) {
        state.split.insert(key);
        state.peak_pending = std::max(state.peak_pending, ++state.pending);
        int& pending = state.chunk_pending[a.chunk];
        state.chunk_peak_pending[a.chunk] = std::max(state.chunk_peak_pending[a.chunk], ++pending);
      }
    }
    return cost;
  }

  // A microbatch's slot on a chunk is taken when its input arrives (as the executor takes it): the
  // receive, the first virtual stage's forward, or the forward of the chunk before it on this stage.
  static void take_slot(StageState& state, int chunk) {
    state.peak_in_flight = std::max(state.peak_in_flight, ++state.in_flight);
    int& in_flight = state.chunk_in_flight[chunk];
    state.chunk_peak_in_flight[chunk] = std::max(state.chunk_peak_in_flight[chunk], ++in_flight);
  }

  // A compute's input is a received message, or, when the neighbouring virtual stage is on this
  // stage, that chunk's own forward (backward) here.
  bool has_input(int s, const Message& message, bool forward) const {
    const StageState& state = state_[s];
    if (layout_.stage_of(message.from) != s) return state.received.count(message) > 0;
    return (forward ? state.forwarded : state.backwarded).count({message.microbatch, layout_.chunk_of(message.from)}) > 0;
  }

  void post(int s, const Action& a) {
    StageState& state = state_[s];
    const std::pair<int, int> key{a.microbatch, a.chunk};
    if (is_compute(a)) fail(s, "groups " + to_text(a) + " with communication");
    if (a.kind == ActionKind::send_forward && !state.forwarded.count(key))
      fail(s, "sends " + to_text(a) + "'s output before computing it");
    if (a.kind == ActionKind::send_backward && !state.backwarded.count(key))
      fail(s, "sends " + to_text(a) + "'s gradient before computing it");
    const Message message = message_of(a, s, layout_);
    const int n = layout_.virtual_stages();
    if (message.from < 0 || message.from >= n || destination(message) < 0 || destination(message) >= n ||
        layout_.stage_of(message.from) == layout_.stage_of(destination(message)))
      fail(s, "has " + to_text(a) + ", but no other stage is at that end");
    if (!(is_send(a) ? sent_ : expected_).insert(message).second) fail(s, "repeats " + to_text(a));
    const int sender = layout_.stage_of(message.from), receiver = layout_.stage_of(destination(message));
    std::vector<Posted>& queue = (is_send(a) ? sends_ : recvs_)[{sender, receiver}];
    state.posted.push_back({{sender, receiver}, queue.size()});
    queue.push_back({message, state.clock, s, state.step});
  }

  [[noreturn]] void fail(int s, const std::string& problem, int step = -1) const {
    std::vector<int> marked(stages_.size(), -1);
    marked[s] = step >= 0 ? step : static_cast<int>(state_[s].step);
    throw std::runtime_error("schedule error: stage " + std::to_string(s) + " step " + std::to_string(marked[s]) +
                             " " + problem + "\n" + format_grid_with_communication(stages_, marked));
  }

  // Where stage `peer`'s list posts the other end of `message`, or that no list does.
  std::string other_end(const Message& message, bool sending, int peer) const {
    const StageSchedule& steps = stages_[peer];
    for (size_t i = 0; i < steps.size(); i++)
      for (const Action& a : steps[i])
        if (!is_compute(a) && is_send(a) != sending && message_of(a, peer, layout_) == message)
          return "stage " + std::to_string(peer) + " posts it only at its step " + std::to_string(i) + " (" +
                 to_text(steps[i]) + "), after its own stuck step " + std::to_string(state_[peer].step) + " (" +
                 to_text(steps[state_[peer].step]) + ")";
    return std::string("no stage ") + (sending ? "receives" : "sends") + " it";
  }

  std::string deadlock_report() const {
    std::string report;
    std::vector<int> marked(stages_.size(), -1);
    for (int s = 0; s < layout_.p; s++) {
      const StageState& state = state_[s];
      if (state.step == stages_[s].size()) continue;
      marked[s] = static_cast<int>(state.step);
      const Step& step = stages_[s][state.step];
      for (size_t i = 0; i < step.size(); i++) {
        const auto& [channel, index] = state.posted[i];
        const bool sending = is_send(step[i]);
        const auto& other_ends = sending ? recvs_ : sends_;
        const auto queue = other_ends.find(channel);
        if (queue != other_ends.end() && index < queue->second.size()) continue;
        const Message message = message_of(step[i], s, layout_);
        const int peer = sending ? channel.second : channel.first;
        report += "stage " + std::to_string(s) + " is stuck at step " + std::to_string(state.step) + " (" +
                  to_text(step) + "): " + (sending ? "it sends " : "it waits for ") + describe(message, layout_) +
                  "; " + other_end(message, sending, peer) + "\n";
      }
    }
    if (report.empty()) return "";
    return "deadlock:\n" + report + format_grid_with_communication(stages_, marked);
  }

  // Every matched send with its receive.
  std::vector<MessageLink> message_links() const {
    std::vector<MessageLink> links;
    for (const auto& [channel, sends] : sends_) {
      const auto recvs = recvs_.find(channel);
      for (size_t k = 0; recvs != recvs_.end() && k < sends.size() && k < recvs->second.size(); k++) {
        const Posted& send = sends[k];
        const Posted& recv = recvs->second[k];
        for (const Action& a : stages_[send.stage][send.step])
          if (is_send(a) && message_of(a, send.stage, layout_) == send.message)
            links.push_back({send.stage, int(send.step), recv.stage, int(recv.step), to_text(a)});
      }
    }
    return links;
  }

  const std::vector<StageSchedule>& stages_;
  StepCosts costs_;
  Placement layout_;
  std::vector<StageState> state_;
  // Posted sends and receives per channel (sender, receiver), in posting order.
  std::map<std::pair<int, int>, std::vector<Posted>> sends_, recvs_;
  std::set<Message> sent_, expected_;
  std::vector<std::vector<double>>* start_time_ = nullptr;
  std::vector<std::vector<double>>* end_time_ = nullptr;
};

}  // namespace

LengthScale length_scale(int T, int maxT, double quadratic_share) {
  const double r = double(T) / maxT;
  return {(1 - quadratic_share) * r + quadratic_share * r * r, r};
}

double compute_time(const StepCosts& costs, const Action& a) {
  LengthScale scale{1, 1};
  if (!costs.lengths.empty()) {
    if (a.microbatch < 0 || size_t(a.microbatch) >= costs.lengths.size())
      throw std::runtime_error("simulate: " + to_text(a) + " has no length among the " +
                               std::to_string(costs.lengths.size()) + " microbatches' lengths");
    scale = costs.lengths[a.microbatch];
  }
  const double input = costs.backward_input * scale.forward_and_input, weight = costs.backward_weight * scale.weight;
  switch (a.kind) {
    case ActionKind::forward: return costs.forward * scale.forward_and_input;
    case ActionKind::backward: return input + weight;
    case ActionKind::backward_input: return input;
    default: return weight;
  }
}

double pair_time(const StepCosts& costs, double first, double second) {
  return costs.pair == PairCost::sum ? first + second : std::max(first, second);
}

Simulation simulate(const std::vector<StageSchedule>& stages, const StepCosts& costs, PlacementKind placement) {
  return Simulator(stages, costs, placement).run();
}

double timeline_column(const StepCosts& costs) {
  double shortest = 1;
  for (const LengthScale& scale : costs.lengths) shortest = std::min(shortest, scale.forward_and_input);
  return costs.forward * shortest;
}

std::string format_timeline(const std::vector<StageSchedule>& stages, const Simulation& simulation,
                            const StepCosts& costs) {
  if (!simulation.deadlock.empty()) throw std::runtime_error("format_timeline: the simulation deadlocked");
  const double column = timeline_column(costs);
  const auto columns = [&](double time) { return static_cast<size_t>(std::lround(time / column)); };
  size_t width = 2;
  for (const StageSchedule& steps : stages)
    for (const Action& a : compute_actions(steps)) width = std::max(width, to_text(a).size());
  if (costs.pair == PairCost::max)  // a pair's slot may be one column, which its two share ("F7&B3.1")
    for (const StageSchedule& steps : stages)
      for (size_t i = 1; i < steps.size(); i++)
        if (steps[i][0].overlapped) width = std::max(width, to_text(steps[i - 1]).size() + to_text(steps[i]).size());
  const std::string last_label = "stage " + std::to_string(stages.size() - 1);
  std::string timeline;
  for (size_t s = 0; s < stages.size(); s++) {
    std::vector<std::string> cells(columns(simulation.makespan), ".");
    for (size_t i = 0; i < stages[s].size(); i++) {
      if (!is_compute(stages[s][i])) continue;
      const Action& a = stages[s][i][0];
      const size_t first = columns(simulation.start_time[s][i]);
      const size_t span = std::max<size_t>(1, columns(simulation.end_time[s][i] - simulation.start_time[s][i]));
      if (a.overlapped && first < cells.size()) {  // the pair's second compute, in its first's slot
        if (span > 1 && first + 1 < cells.size()) cells[first + 1] = to_text(a);
        else cells[first] += to_text(a);
        continue;
      }
      for (size_t c = first; c < first + span && c < cells.size(); c++)
        cells[c] = c == first ? to_text(a) : std::string(width, '-');
    }
    std::string label = "stage " + std::to_string(s);
    std::string row = label + std::string(last_label.size() - label.size(), ' ') + " |";
    for (const std::string& cell : cells) row += " " + cell + std::string(width - std::min(width, cell.size()), ' ');
    while (row.back() == ' ') row.pop_back();
    timeline += row + "\n";
  }
  return timeline;
}
