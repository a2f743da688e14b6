// The check of an executor's trace (pipeline/execute.h's ExecutedStep, what each step actually
// used) against the stage's schedule, from the schedule's rules alone, not from the executor's
// bookkeeping: every step ran the schedule's action (kind, microbatch, chunk); every message
// went to the stage that holds the virtual stage at its other end (the placement's: ring or V);
// replaying the slots' takes (a receive, the first virtual stage's forward, a local hand-over)
// and gives-back (B or I), no slot is held by two microbatches at once, a forward and a send read
// the slot its input came in, a backward the slot its forward used, and every slot is back at the
// end; replaying the weight-gradient-input buffers' takes (I) and gives-back (W) the same way, a W
// reads the buffer its own I filled; each chunk used as many distinct slots and weight buffers as
// the accounting allocated; with recompute, a forward's output waits in its own send buffer until
// its send; and a B or I recomputed its forward exactly when the chunk's working set held another
// microbatch's forward (always false without recompute), a W never.
#pragma once
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/execute.h"
#include "pipeline/schedule.h"

namespace trace_check {

// What the replay holds: per chunk, slot -> microbatch (-1: free); the send buffers ->
// (microbatch, chunk).
struct Holdings {
  std::vector<std::vector<int>> slots;
  std::vector<std::set<int>> slots_used;
  std::map<int, std::pair<int, int>> sends;
  std::map<std::pair<int, int>, int> input_slot;  // (microbatch, chunk) -> the slot its input came in
  std::vector<std::map<int, int>> weight_buffers;  // per chunk: buffer -> the microbatch whose I filled it
  std::vector<std::set<int>> weight_buffers_used;
};

inline std::string key_text(int microbatch, int chunk) {
  return "microbatch " + std::to_string(microbatch) + " chunk " + std::to_string(chunk);
}

// Takes slot of chunk for microbatch; returns the problem, or "".
inline std::string take(Holdings& h, int chunk, int slot, int microbatch) {
  if (slot < 0) return "no slot for " + key_text(microbatch, chunk);
  std::vector<int>& holders = h.slots[chunk];
  if (size_t(slot) >= holders.size()) holders.resize(slot + 1, -1);
  if (holders[slot] != -1)
    return "slot " + std::to_string(slot) + " of chunk " + std::to_string(chunk) + " taken by microbatch " +
           std::to_string(microbatch) + " while microbatch " + std::to_string(holders[slot]) + " holds it";
  holders[slot] = microbatch;
  h.slots_used[chunk].insert(slot);
  h.input_slot[{microbatch, chunk}] = slot;
  return "";
}

// Whether slot of chunk is the one microbatch's input came in and still holds; returns the problem, or "".
inline std::string check_held(const Holdings& h, int chunk, int slot, int microbatch) {
  const auto found = h.input_slot.find({microbatch, chunk});
  if (found == h.input_slot.end()) return key_text(microbatch, chunk) + " has no input slot";
  if (found->second != slot)
    return "slot " + std::to_string(slot) + " used for " + key_text(microbatch, chunk) + ", whose input is in slot " +
           std::to_string(found->second);
  const std::vector<int>& holders = h.slots[chunk];
  if (size_t(slot) >= holders.size() || holders[slot] != microbatch)
    return "slot " + std::to_string(slot) + " of chunk " + std::to_string(chunk) + " used for microbatch " +
           std::to_string(microbatch) + " after it was given back";
  return "";
}

// A forward's output: nowhere on the head's chunk or (without recompute, sent from its slot) when
// the next virtual stage is on another stage; into the next chunk's slot on a local hand-over
// (local_next: that chunk, else -1); else into a send buffer until its send.
inline std::string hand_over(Holdings& h, const ExecutedStep& forward, int local_next, bool recompute, bool head) {
  if (head || (local_next < 0 && !recompute))
    return forward.output_buffer == -1 ? "" : "an output buffer where none is needed";
  if (local_next >= 0) return take(h, local_next, forward.output_buffer, forward.microbatch);
  if (forward.output_buffer < 0 || h.sends.count(forward.output_buffer))
    return "its output into send buffer " + std::to_string(forward.output_buffer) + ", which is held";
  h.sends[forward.output_buffer] = {forward.microbatch, forward.chunk};
  return "";
}

// The weight-gradient-input buffer an I fills (take) or a W reads and gives back; returns the problem, or "".
inline std::string take_weight_buffer(Holdings& h, const ExecutedStep& input) {
  std::map<int, int>& held = h.weight_buffers[input.chunk];
  if (input.weight_inputs < 0) return "no weight-gradient-input buffer";
  if (held.count(input.weight_inputs))
    return "weight buffer " + std::to_string(input.weight_inputs) + " filled while microbatch " +
           std::to_string(held[input.weight_inputs]) + "'s W has not read it";
  held[input.weight_inputs] = input.microbatch;
  h.weight_buffers_used[input.chunk].insert(input.weight_inputs);
  return "";
}

inline std::string give_back_weight_buffer(Holdings& h, const ExecutedStep& weight) {
  std::map<int, int>& held = h.weight_buffers[weight.chunk];
  const auto found = held.find(weight.weight_inputs);
  if (weight.slot != -1 || weight.recomputed) return "a W that used a slot or recomputed";
  if (found == held.end() || found->second != weight.microbatch)
    return "read weight buffer " + std::to_string(weight.weight_inputs) + ", which its I did not fill";
  held.erase(found);
  return "";
}

// The problems of trace against schedule on stage of the placement's stages and chunks (slots and
// weight_buffers: the accounting's per chunk), at most one per step, in order; empty when the
// executor ran the schedule.
inline std::vector<std::string> trace_problems(const std::vector<ExecutedStep>& trace, const StageSchedule& schedule,
                                               const Placement& placement, int stage, bool recompute,
                                               const std::vector<int>& slots, const std::vector<int>& weight_buffers) {
  if (trace.size() != schedule.size())
    return {std::to_string(trace.size()) + " executed steps for " + std::to_string(schedule.size()) + " scheduled"};
  const int v = placement.v;
  const auto first_virtual_stage = [&](int chunk) { return placement.is_first(stage, chunk); };
  const auto has_head = [&](int chunk) { return placement.is_last(stage, chunk); };
  // The stage at the other end of a message of chunk: the next virtual stage's, or the previous one's.
  const auto neighbour = [&](int chunk, bool next) {
    return placement.stage_of(placement.virtual_stage(stage, chunk) + (next ? 1 : -1));
  };
  const auto local_next = [&](int chunk) {
    const int vs = placement.virtual_stage(stage, chunk) + 1;
    return vs < placement.virtual_stages() && placement.stage_of(vs) == stage ? placement.chunk_of(vs) : -1;
  };
  Holdings h{std::vector<std::vector<int>>(v), std::vector<std::set<int>>(v), {}, {},
             std::vector<std::map<int, int>>(v), std::vector<std::set<int>>(v)};
  std::vector<int> working(v, -1);  // per chunk: whose forward the working set holds
  std::vector<std::string> problems;
  for (size_t i = 0; i < trace.size(); ++i) {
    const ExecutedStep& ran = trace[i];
    const Step& planned = schedule[i];
    std::string problem;
    if (ran.compute != is_compute(planned)) {
      problem = "a compute and a transfer step swapped";
    } else if (ran.compute) {
      const Action& a = planned[0];
      if (ran.kind != a.kind || ran.microbatch != a.microbatch || ran.chunk != a.chunk) {
        problem = "ran another action";
      } else if (ran.kind == ActionKind::forward) {
        problem = first_virtual_stage(ran.chunk) ? take(h, ran.chunk, ran.slot, ran.microbatch)
                                                 : check_held(h, ran.chunk, ran.slot, ran.microbatch);
        working[ran.chunk] = ran.microbatch;
        if (problem.empty()) problem = hand_over(h, ran, local_next(ran.chunk), recompute, has_head(ran.chunk));
      } else if (ran.kind == ActionKind::backward_weight) {
        problem = give_back_weight_buffer(h, ran);
      } else {
        problem = check_held(h, ran.chunk, ran.slot, ran.microbatch);
        if (problem.empty()) h.slots[ran.chunk][ran.slot] = -1;
        if (problem.empty() && ran.recomputed != (recompute && working[ran.chunk] != ran.microbatch))
          problem = ran.recomputed ? "recomputed a forward the working set holds" : "did not recompute its forward";
        if (ran.recomputed) working[ran.chunk] = ran.microbatch;
        if (problem.empty() && ran.kind == ActionKind::backward_input) problem = take_weight_buffer(h, ran);
        if (problem.empty() && ran.kind == ActionKind::backward && ran.weight_inputs != -1)
          problem = "a B that filled a weight buffer";
      }
    } else if (ran.messages.size() != planned.size()) {
      problem = std::to_string(ran.messages.size()) + " messages for " + std::to_string(planned.size());
    } else {
      for (size_t j = 0; j < planned.size() && problem.empty(); ++j) {
        const ExecutedMessage& m = ran.messages[j];
        const Action& a = planned[j];
        const bool to_next = a.kind == ActionKind::send_forward || a.kind == ActionKind::recv_backward;
        const int peer = m.kind == a.kind ? neighbour(a.chunk, to_next) : -1;
        if (m.kind != a.kind || m.microbatch != a.microbatch || m.chunk != a.chunk) {
          problem = "message " + std::to_string(j) + " is another";
        } else if (m.peer != peer || peer == stage) {
          problem = "message " + std::to_string(j) + " with stage " + std::to_string(m.peer) + ", not " +
                    std::to_string(peer);
        } else if (m.kind == ActionKind::recv_forward) {
          problem = take(h, m.chunk, m.buffer, m.microbatch);
        } else if (m.kind == ActionKind::send_forward && !recompute) {
          problem = check_held(h, m.chunk, m.buffer, m.microbatch);
        } else if (m.kind == ActionKind::send_forward) {
          const auto found = h.sends.find(m.buffer);
          if (found == h.sends.end() || found->second != std::make_pair(m.microbatch, m.chunk))
            problem = "sent send buffer " + std::to_string(m.buffer) + ", which does not hold its output";
          else
            h.sends.erase(found);
        }
      }
    }
    if (!problem.empty()) problems.push_back("step " + std::to_string(i) + " (" + to_text(planned) + ", ran " +
                                             to_text(ran) + "): " + problem);
  }
  for (int c = 0; c < v; ++c) {
    for (size_t slot = 0; slot < h.slots[c].size(); ++slot)
      if (h.slots[c][slot] != -1)
        problems.push_back("slot " + std::to_string(slot) + " of chunk " + std::to_string(c) +
                           " still held at the end by microbatch " + std::to_string(h.slots[c][slot]));
    if (size_t(c) < slots.size() && int(h.slots_used[c].size()) != slots[c])
      problems.push_back("chunk " + std::to_string(c) + " used " + std::to_string(h.slots_used[c].size()) +
                         " distinct slots, the accounting allocated " + std::to_string(slots[c]));
    if (!h.weight_buffers[c].empty())
      problems.push_back(std::to_string(h.weight_buffers[c].size()) + " weight buffers of chunk " + std::to_string(c) +
                         " never read by a W");
    if (size_t(c) < weight_buffers.size() && int(h.weight_buffers_used[c].size()) != weight_buffers[c])
      problems.push_back("chunk " + std::to_string(c) + " used " + std::to_string(h.weight_buffers_used[c].size()) +
                         " distinct weight buffers, the accounting allocated " + std::to_string(weight_buffers[c]));
  }
  if (slots.size() != size_t(v) || weight_buffers.size() != size_t(v))
    problems.push_back("the accounting has " + std::to_string(slots.size()) + " chunks, not " + std::to_string(v));
  if (!h.sends.empty()) problems.push_back(std::to_string(h.sends.size()) + " outputs never sent");
  return problems;
}

// One failure naming the first problem (and how many there are) with the whole trace.
inline void expect_trace_follows_schedule(const std::vector<ExecutedStep>& trace, const StageSchedule& schedule,
                                          const Placement& placement, int stage, bool recompute,
                                          const ExecutorAccounting& accounting) {
  const std::vector<std::string> problems = trace_problems(trace, schedule, placement, stage, recompute,
                                                           accounting.slots, accounting.weight_buffers);
  EXPECT_TRUE(problems.empty()) << "stage " << stage << ": " << problems.size() << " problems, the first: "
                                << (problems.empty() ? "" : problems[0]) << "\ntrace: " << trace_text(trace);
}

}  // namespace trace_check
