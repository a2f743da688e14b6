// The check of an executor's trace (pipeline/execute.h's ExecutedStep, what each step actually
// used) against the stage's schedule, from the schedule's rules alone, not from the executor's
// bookkeeping: every step ran the schedule's action (kind, microbatch, chunk); every message
// went to the neighbour its direction names in the ring (sF and rB: the next stage, sB and rF:
// the previous); replaying the slots' takes (a receive, the first virtual stage's forward, a
// local hand-over) and gives-back (the backward), no slot is held by two microbatches at once, a
// forward and a send read the slot its input came in, a backward the slot its forward used, and
// every slot is back at the end; each chunk used as many distinct slots as the accounting
// allocated; with recompute, a forward's output waits in its own send buffer until its send;
// and a backward recomputed its forward exactly when the chunk's working set held another
// microbatch's forward (always false without recompute).
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

// A forward's output: nowhere on the head's chunk or (without recompute, sent from its slot)
// with p > 1; into the next chunk's slot with p == 1; else into a send buffer until its send.
inline std::string hand_over(Holdings& h, const ExecutedStep& forward, int p, bool recompute, bool head) {
  if (head || (p > 1 && !recompute))
    return forward.output_buffer == -1 ? "" : "an output buffer where none is needed";
  if (p == 1) return take(h, forward.chunk + 1, forward.output_buffer, forward.microbatch);
  if (forward.output_buffer < 0 || h.sends.count(forward.output_buffer))
    return "its output into send buffer " + std::to_string(forward.output_buffer) + ", which is held";
  h.sends[forward.output_buffer] = {forward.microbatch, forward.chunk};
  return "";
}

// The problems of trace against schedule on stage of p with v chunks (slots: the accounting's
// per chunk), at most one per step, in order; empty when the executor ran the schedule.
inline std::vector<std::string> trace_problems(const std::vector<ExecutedStep>& trace, const StageSchedule& schedule,
                                               int p, int v, int stage, bool recompute, const std::vector<int>& slots) {
  if (trace.size() != schedule.size())
    return {std::to_string(trace.size()) + " executed steps for " + std::to_string(schedule.size()) + " scheduled"};
  const int next = (stage + 1) % p, previous = (stage + p - 1) % p;
  const auto first_virtual_stage = [&](int chunk) { return stage == 0 && chunk == 0; };
  const auto has_head = [&](int chunk) { return stage == p - 1 && chunk == v - 1; };
  Holdings h{std::vector<std::vector<int>>(v), std::vector<std::set<int>>(v), {}, {}};
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
        if (problem.empty()) problem = hand_over(h, ran, p, recompute, has_head(ran.chunk));
      } else {
        problem = check_held(h, ran.chunk, ran.slot, ran.microbatch);
        if (problem.empty()) h.slots[ran.chunk][ran.slot] = -1;
        if (problem.empty() && ran.recomputed != (recompute && working[ran.chunk] != ran.microbatch))
          problem = ran.recomputed ? "recomputed a forward the working set holds" : "did not recompute its forward";
        if (ran.recomputed) working[ran.chunk] = ran.microbatch;
      }
    } else if (ran.messages.size() != planned.size()) {
      problem = std::to_string(ran.messages.size()) + " messages for " + std::to_string(planned.size());
    } else {
      for (size_t j = 0; j < planned.size() && problem.empty(); ++j) {
        const ExecutedMessage& m = ran.messages[j];
        const Action& a = planned[j];
        const bool to_next = a.kind == ActionKind::send_forward || a.kind == ActionKind::recv_backward;
        if (m.kind != a.kind || m.microbatch != a.microbatch || m.chunk != a.chunk) {
          problem = "message " + std::to_string(j) + " is another";
        } else if (m.peer != (to_next ? next : previous)) {
          problem = "message " + std::to_string(j) + " with stage " + std::to_string(m.peer) + ", not " +
                    std::to_string(to_next ? next : previous);
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
  }
  if (slots.size() != size_t(v))
    problems.push_back("the accounting has " + std::to_string(slots.size()) + " chunks, not " + std::to_string(v));
  if (!h.sends.empty()) problems.push_back(std::to_string(h.sends.size()) + " outputs never sent");
  return problems;
}

// One failure naming the first problem (and how many there are) with the whole trace.
inline void expect_trace_follows_schedule(const std::vector<ExecutedStep>& trace, const StageSchedule& schedule,
                                          int p, int v, int stage, bool recompute, const std::vector<int>& slots) {
  const std::vector<std::string> problems = trace_problems(trace, schedule, p, v, stage, recompute, slots);
  EXPECT_TRUE(problems.empty()) << "stage " << stage << ": " << problems.size() << " problems, the first: "
                                << (problems.empty() ? "" : problems[0]) << "\ntrace: " << trace_text(trace);
}

}  // namespace trace_check
