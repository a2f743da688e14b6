// Pipeline schedules as data: for each stage, the ordered list of steps it runs in one
// training step (forwards, backwards, and the sends and receives between stages), with a
// short text form so a schedule prints, compares and parses as text.
//
// Stages and chunks: stage s of p runs v model chunks; each chunk is one of the n = p v virtual
// stages, and activations go from virtual stage i to i + 1, gradients from i + 1 to i. Where each
// virtual stage lives is the schedule's placement:
//   ring (afab, 1f1b, interleaved, looped-bfs, zero-bubble H1 and H2): chunk c of stage s is
//     virtual stage c p + s (Megatron's layout). Across a chunk boundary that is stage p-1 -> stage 0, so a
//     stage's "next" is (s + 1) mod p and its "previous" (s - 1) mod p;
//   v (zb-v, v = 2): stage s holds virtual stages s and 2p - 1 - s, so a microbatch goes down
//     the stages on chunk 0 and back up on chunk 1; stage 0 holds both the embedding and the
//     head, and the turn on stage p - 1 (chunk 0 to chunk 1) is local.
// A hand-over between virtual stages of one stage (every one when p = 1) has no action.
//
// Backwards: B is a chunk's whole backward. The zero-bubble schedules split it (Qi et al., "Zero
// Bubble Pipeline Parallelism", 2024) into I, the input gradient (what the previous virtual stage
// waits for) and W, the parameter gradients (which nobody waits for, so they fill the bubbles):
// I then W computes bitwise what B does (model/gpt.cuh).
//
// A schedule is built in two passes, as in picotron and torch.distributed.pipelining: the
// schedule's function gives the compute order (F, B, I, W), then add_communication lowers it to
// steps. A step is one compute action, or sends and receives posted together as one NCCL group.
// Each compute's send is posted in the group point after it. In afab and 1f1b its receive is
// posted in the group point before it, so a group point sits between every two computes (Megatron's
// 1F1B: "F3 sF3+rB1 B1 sB1+rF4 F4" is send_forward_recv_backward, then send_backward_recv_forward).
// The interleaved schedule (with microbatch groups of p: pipeline/interleaved.h) posts each receive
// one compute earlier, in the group point after the stage's previous compute of the same direction
// ("F4.1 sF4.1+rF5.1 B2 sB2+rB3 F5.1":
// Megatron's overlap_p2p_comm, send_forward_recv_forward then send_backward_recv_backward): on the executor's
// transfer stream a forward's input then arrives while the backward before it runs, for one more
// received input held per stage. 1F1B cannot do the same: its groups would wait for each other in
// a cycle (tests/schedule_test.cu), which is why Megatron overlaps the interleaved schedule only.
// Why groups: sends block until the peer posts the matching receive (NCCL's point-to-point
// calls behave so for large tensors). In 1F1B's steady state stage 0 sends F1's output while
// stage 1 sends B0's gradient; posted alone, each send waits for a receive the other has not
// reached. In one group with the receive, both complete. pipeline/simulate checks every schedule
// with exactly these rules. The actions and their text form: pipeline/action.h.
#pragma once

#include <string>
#include <vector>

#include "pipeline/action.h"

// Compute orders (F and B only) of one stage. Each throws std::runtime_error with one line
// saying what to change when (p, m, v, stage) does not fit the schedule.
// GPipe: every forward, then every backward, microbatches in order.
std::vector<Action> afab_order(int p, int m, int stage);
// PipeDream-Flush: min(p - s - 1, m) warm-up forwards, then one forward and one backward
// in turn, then the remaining backwards.
std::vector<Action> one_f_one_b_order(int p, int m, int stage);
// Megatron's interleaved 1F1B (--microbatch-group) is in pipeline/interleaved.h.
// The zero-bubble orders are in pipeline/zero_bubble.h, v-half's and v-min's in
// pipeline/controllable_memory.h, zb-interleaved's in pipeline/interleaved_zero_bubble.h,
// dualpipev's in pipeline/dual_pipe_v.h.

// The lowering pass (see the top): a stage's compute order as steps with its sends and
// receives, for the stages and chunks of placement. Each send goes in the group point right after
// the compute producing it; each receive in the group point right before the compute using it
// (before_use), or, with after_previous_of_direction, in the one right after the stage's previous
// compute of the same direction (a forward for a forward, a B or I for a B or I) where there is one.
enum class ReceivePosting { before_use, after_previous_of_direction };
StageSchedule add_communication(const std::vector<Action>& compute, const Placement& placement, int stage,
                                ReceivePosting posting = ReceivePosting::before_use);

// The lowering of every stage's compute order at once, for orders that come without group points
// of their own (the zero-bubble schedules, a schedule file): the orders are timed as a data flow
// with equal costs (simulate_dataflow, t_f = t_i = t_w), each message is placed just before the
// compute that consumes it, and each stage's list is its share of that one order in time, with
// the messages between two computes in one group. Because every list is the projection of one
// order, no costs can make it deadlock (lower_in_time_order.cpp says why). At equal costs no
// stage waits in a send longer than the paper's timeline has it wait. Throws std::runtime_error
// with the deadlock report when the orders wait for each other in a cycle.
std::vector<StageSchedule> add_communication_in_time_order(const std::vector<std::vector<Action>>& compute,
                                                           const Placement& placement);

// The full list of one stage, and of every stage (index = stage). Only interleaved, looped-bfs
// (pipeline/looped_bfs.h) and zb-interleaved (which needs v >= 2) take v > 1; zb-v, v-half and v-min
// run v = 2 (1 is taken to mean 2), and so does dualpipev. group is interleaved's N (pipeline/interleaved.h; 0: p), which
// the other schedules do not take.
StageSchedule make_schedule(ScheduleKind kind, int p, int m, int v, int stage, int group = 0);
std::vector<StageSchedule> make_all_schedules(ScheduleKind kind, int p, int m, int v, int group = 0);
// The chunks per stage the schedule runs when asked for v: 2 in the v placement, else v.
int chunks_per_stage(ScheduleKind kind, int v);

// A whole schedule: every stage's steps and where its virtual stages live.
struct PipelineSchedule {
  Placement placement;
  std::vector<StageSchedule> stages;  // index = stage
};
PipelineSchedule make_pipeline_schedule(ScheduleKind kind, int p, int m, int v, int group = 0);

// Whether a stage runs an overlapped pair (pipeline/action.h: DualPipeV's "F7&B3.1").
bool has_overlapped_pairs(const PipelineSchedule& schedule);

// The compute actions of a list, in order.
std::vector<Action> compute_actions(const StageSchedule& steps);

// One row per stage ("stage 0 | F0 F1 B0 ..."), steps in columns of equal width.
// format_grid shows the compute actions only; format_grid_with_communication shows every
// step and brackets marked_steps[s] on row s (">rB0<"; -1 or a missing entry marks nothing). An overlapped
// pair's two computes share one cell ("F7&B3.1").
std::string format_grid(const std::vector<StageSchedule>& stages);
std::string format_grid_with_communication(const std::vector<StageSchedule>& stages,
                                           const std::vector<int>& marked_steps = {});
