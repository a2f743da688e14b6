// A schedule's words: the actions a stage runs (forwards, backwards, sends and receives), the
// steps they form, the schedule kinds and placements, and their text form, which schedules,
// schedule files and the zero-bubble orders share (pipeline/schedule.h puts them together).
//
// Text form of actions (microbatch 3, chunk 1 shown; ".c" is left out for chunk 0, so "F3" is
// "F3.0"):
//   F3.1   forward              B3.1   backward (I3.1 then W3.1 in one)
//   I3.1   input gradient       W3.1   parameter gradients
//   rF3.1  receive F3.1's input from the previous virtual stage       (recv_forward)
//   sF3.1  send F3.1's output to the next virtual stage               (send_forward)
//   rB3.1  receive the output gradient of B3.1 or I3.1 from the next  (recv_backward)
//   sB3.1  send the input gradient of B3.1 or I3.1 to the previous    (send_backward)
//   &B3.1  B3.1 run at the same time as the compute step before it: an overlapped pair
// A group step joins its actions with '+' ("sF3+rB1"); a list joins its steps with spaces, and a
// pair's two computes with '&' ("F7&B3.1": DualPipeV's forward of one chunk with a backward of the
// other, which run on two compute streams at once).
#pragma once

#include <string>
#include <vector>

enum class ActionKind {
  forward,
  backward,
  backward_input,
  backward_weight,
  recv_forward,
  send_forward,
  recv_backward,
  send_backward
};

struct Action {
  ActionKind kind;
  int microbatch;
  int chunk;
  // Runs at the same time as the compute step before it (the pair's second compute; computes only).
  bool overlapped = false;
  bool operator==(const Action&) const = default;
};

// One compute action, or one or more sends and receives posted as one NCCL group (sends
// first, then receives, each in the order the peers expect them).
using Step = std::vector<Action>;
// One stage's steps, in order.
using StageSchedule = std::vector<Step>;

enum class ScheduleKind { afab, one_f_one_b, interleaved, zb_h1, zb_h2, zb_v, v_half, v_min, looped_bfs, zb_interleaved, dual_pipe_v };

// Where the virtual stages live (see the top).
enum class PlacementKind { ring, v_shape };
struct Placement {
  PlacementKind kind;
  int p;  // stages
  int v;  // chunks per stage (2 for v_shape)
  int virtual_stage(int stage, int chunk) const;
  int stage_of(int virtual_stage) const;
  int chunk_of(int virtual_stage) const;
  int virtual_stages() const { return p * v; }
  bool is_first(int stage, int chunk) const { return virtual_stage(stage, chunk) == 0; }
  bool is_last(int stage, int chunk) const { return virtual_stage(stage, chunk) == virtual_stages() - 1; }
};
// The schedule's placement: v_shape for zb-v, v-half, v-min and dualpipev, else ring.
Placement placement_of(ScheduleKind kind, int p, int v);
// "ring" or "v".
std::string placement_name(PlacementKind kind);

bool is_compute(const Action& action);  // F, B, I or W
bool is_compute(const Step& step);
bool is_send(const Action& action);  // sF or sB
// B or I: consumes the output gradient and produces the input gradient.
bool computes_input_gradient(ActionKind kind);

// Why the compute `second`, marked overlapped, cannot pair with the compute `first` before it
// under placement ("" when it can): a pair is a forward then a B or I on the other chunk of a v
// placement (DualPipeV's, and PyTorch's OVERLAP_F_B), so its first compute is not overlapped.
std::string pair_problem(const Action& first, const Action& second, PlacementKind placement);

std::string to_text(const Action& action);
std::string to_text(const Step& step);
std::string to_text(const StageSchedule& steps);
// Throw std::runtime_error naming the text that is not an action or step (a compute action
// must be a step of its own; parse_schedule reads "F7&B3.1" as two steps, the second overlapped).
Action parse_action(const std::string& text);
Step parse_step(const std::string& text);
StageSchedule parse_schedule(const std::string& text);

// "afab", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "looped-bfs", "zb-interleaved" or "dualpipev";
// throws naming the unknown schedule and the known ones.
ScheduleKind parse_schedule_kind(const std::string& name);
std::string schedule_name(ScheduleKind kind);
// Every kind, in the order parse_schedule_kind's error lists them.
std::vector<ScheduleKind> all_schedule_kinds();
// Whether the schedule splits backwards into I and W.
bool splits_backward(ScheduleKind kind);

// Throws std::runtime_error with one line when p < 1, m < 1 or stage is outside [0, p).
void check_pipeline_stage(int p, int m, int stage);
