// The lowering of compute orders that come without group points of their own: the zero-bubble
// schedules and schedules read from a file (pipeline/schedule.h's add_communication_in_time_order).
//
// Why this order cannot deadlock: every stage's list is the projection of one global order of all
// computes and messages. Take the first message of that order that has not completed: each of its
// two stages reaches it, since everything before it in their lists comes before it in the global
// order (computes whose inputs are earlier messages, which completed, and groups of earlier
// messages, which are posted before it in the same group at worst). So every message completes,
// whatever the costs. The same projection puts the messages of each pair of stages in the same
// order on both sides, as NCCL, which has no tags, needs.
#include <algorithm>
#include <stdexcept>
#include <tuple>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

namespace {

// A compute, or a message placed just before the compute that consumes it.
struct Event {
  double time;
  bool is_compute;
  int stage, index;  // compute: its stage and index in the stage's order; message: the consumer's
  int sender;        // message: the stage that sends it
  Action send, recv;
  auto sort_key() const {
    // At one time messages come first, so that a consumer starting then follows its message.
    return std::make_tuple(time, is_compute, stage, index, sender);
  }
};

}  // namespace

std::vector<StageSchedule> add_communication_in_time_order(const std::vector<std::vector<Action>>& compute,
                                                           const Placement& placement) {
  const Simulation timing = simulate_dataflow(compute, {1, 1, 1, 0}, placement.kind);
  if (!timing.deadlock.empty()) throw std::runtime_error("schedule error: " + timing.deadlock);
  const int p = int(compute.size()), last = placement.virtual_stages() - 1;
  std::vector<Event> events;
  for (int s = 0; s < p; s++)
    for (int i = 0; i < int(compute[s].size()); i++) {
      const Action& a = compute[s][i];
      const double start = timing.start_time[s][i];
      events.push_back({start, true, s, i, -1, {}, {}});
      if (a.kind == ActionKind::backward_weight) continue;
      const int vs = placement.virtual_stage(s, a.chunk);
      const bool forward = a.kind == ActionKind::forward;
      const int from = forward ? vs - 1 : vs + 1;
      if (from < 0 || from > last || placement.stage_of(from) == s) continue;
      const int sender = placement.stage_of(from);
      const Action send{forward ? ActionKind::send_forward : ActionKind::send_backward, a.microbatch,
                        placement.chunk_of(from)};
      const Action recv{forward ? ActionKind::recv_forward : ActionKind::recv_backward, a.microbatch, a.chunk};
      events.push_back({start, false, s, i, sender, send, recv});
    }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) { return a.sort_key() < b.sort_key(); });
  std::vector<StageSchedule> stages(p);
  std::vector<Step> sends(p), receives(p);  // each stage's group being gathered
  const auto close_group = [&](int s) {
    Step group = sends[s];
    group.insert(group.end(), receives[s].begin(), receives[s].end());
    if (!group.empty()) stages[s].push_back(group);
    sends[s].clear();
    receives[s].clear();
  };
  for (const Event& e : events) {
    if (e.is_compute) {
      close_group(e.stage);
      stages[e.stage].push_back({compute[e.stage][e.index]});
    } else {
      sends[e.sender].push_back(e.send);
      receives[e.stage].push_back(e.recv);
    }
  }
  for (int s = 0; s < p; s++) close_group(s);
  return stages;
}
