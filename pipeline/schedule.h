// Pipeline schedules as data: for each stage, the ordered list of steps it runs in one
// training step (forwards, backwards, and the sends and receives between neighbouring
// stages), with a short text form so a schedule prints, compares and parses as text.
//
// Stages and chunks: stage s of p runs v model chunks; chunk c of stage s is virtual stage
// c*p + s of the n = p*v virtual stages (Megatron's layout), so activations go from virtual
// stage i to i + 1 and gradients from i + 1 to i. Across a chunk boundary that is stage p-1 ->
// stage 0 (the ring of the interleaved schedule): a stage's "next" is (s + 1) mod p and its
// "previous" (s - 1) mod p. With p = 1 every hand-over is local and has no action.
//
// A schedule is built in two passes, as in picotron and torch.distributed.pipelining: the
// schedule's function gives the compute order (F and B only), then add_communication lowers
// it to steps. A step is one compute action, or sends and receives posted together as one
// NCCL group. Each compute's receive is posted in the group point before it and its send in
// the group point after it; a group point sits between every two computes (Megatron's 1F1B:
// "F3 sF3+rB1 B1 sB1+rF4 F4" is send_forward_recv_backward, then send_backward_recv_forward),
// except that in the interleaved schedule a forward and the backward right after it share the
// group point after both ("F3.1 B1 sF3.1+sB1+rF4.1+rB2", Megatron's
// send_forward_backward_recv_forward_backward).
// Why groups: sends block until the peer posts the matching receive (NCCL's point-to-point
// calls behave so for large tensors). In 1F1B's steady state stage 0 sends F1's output while
// stage 1 sends B0's gradient; posted alone, each send waits for a receive the other has not
// reached. In one group with the receive, both complete. The interleaved schedule's ring and
// its chunk-deep warm-up need the wider groups; pipeline/simulate checks every schedule with
// exactly these rules.
//
// Text form of actions (microbatch 3, chunk 1 shown; ".c" is left out for chunk 0, so "F3" is
// "F3.0"):
//   F3.1   forward              B3.1   backward
//   rF3.1  receive F3.1's input from the previous stage    (recv_forward)
//   sF3.1  send F3.1's output to the next stage            (send_forward)
//   rB3.1  receive B3.1's output gradient from the next    (recv_backward)
//   sB3.1  send B3.1's input gradient to the previous      (send_backward)
// A group step joins its actions with '+' ("sF3+rB1"); a list joins its steps with spaces.
#pragma once

#include <string>
#include <vector>

enum class ActionKind { forward, backward, recv_forward, send_forward, recv_backward, send_backward };

struct Action {
  ActionKind kind;
  int microbatch;
  int chunk;
  bool operator==(const Action&) const = default;
};

// One compute action, or one or more sends and receives posted as one NCCL group (sends
// first, then receives, each in the order the peers expect them).
using Step = std::vector<Action>;
// One stage's steps, in order.
using StageSchedule = std::vector<Step>;

enum class ScheduleKind { afab, one_f_one_b, interleaved };

bool is_compute(const Action& action);  // F or B
bool is_compute(const Step& step);
bool is_send(const Action& action);  // sF or sB

std::string to_text(const Action& action);
std::string to_text(const Step& step);
std::string to_text(const StageSchedule& steps);
// Throw std::runtime_error naming the text that is not an action or step (a compute action
// must be a step of its own).
Action parse_action(const std::string& text);
Step parse_step(const std::string& text);
StageSchedule parse_schedule(const std::string& text);

// "afab", "1f1b" or "interleaved"; throws naming the unknown schedule and the known ones.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_name(ScheduleKind kind);

// Compute orders (F and B only) of one stage. Each throws std::runtime_error with one line
// saying what to change when (p, m, v, stage) does not fit the schedule.
// GPipe: every forward, then every backward, microbatches in order.
std::vector<Action> afab_order(int p, int m, int stage);
// PipeDream-Flush: min(p - s - 1, m) warm-up forwards, then one forward and one backward
// in turn, then the remaining backwards.
std::vector<Action> one_f_one_b_order(int p, int m, int stage);
// Megatron's interleaved 1F1B over v chunks per stage: interleaved_warmup(...) forwards
// (2 (p - s - 1) + (v - 1) p, or all m v of them when m = p), then that many fewer
// forward-backward pairs than m v, then the remaining backwards. m must be a multiple of p
// and at least p.
std::vector<Action> interleaved_order(int p, int m, int v, int stage);
int interleaved_warmup(int p, int m, int v, int stage);

// The lowering pass (see the top): a stage's compute order as steps with its sends and
// receives. compute[first_pair + 2k] (a forward) and compute[first_pair + 2k + 1] (the
// backward after it), k < pairs, share the group point after both (the steady state of the
// interleaved schedule; none for afab and 1f1b).
StageSchedule add_communication(const std::vector<Action>& compute, int p, int v, int stage, size_t first_pair = 0,
                                size_t pairs = 0);

// The full list of one stage, and of every stage (index = stage). afab and 1f1b need v = 1.
StageSchedule make_schedule(ScheduleKind kind, int p, int m, int v, int stage);
std::vector<StageSchedule> make_all_schedules(ScheduleKind kind, int p, int m, int v);

// The compute actions of a list, in order.
std::vector<Action> compute_actions(const StageSchedule& steps);

// One row per stage ("stage 0 | F0 F1 B0 ..."), steps in columns of equal width.
// format_grid shows the compute actions only; format_grid_with_communication shows every
// step and brackets marked_steps[s] on row s (">rB0<"; -1 or a missing entry marks nothing).
std::string format_grid(const std::vector<StageSchedule>& stages);
std::string format_grid_with_communication(const std::vector<StageSchedule>& stages,
                                           const std::vector<int>& marked_steps = {});
