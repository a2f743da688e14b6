// A schedule from a file (--schedule-file): the compute grid in the text form --print-schedule
// prints, so that a printed schedule can be edited and run:
//
//   placement v          # optional: ring (the default) or v (two chunks per stage, as zb-v)
//   stage 0 | F0 F1 I0 W0 F2 ...
//   stage 1 | F0 I0 F1 ...
//
// one line per stage, in order, computes only (F, B, I, W; ".c" for chunk c); blank lines and
// everything after '#' are ignored. "F7&B3.1" is an overlapped pair, one token: the two computes
// run at the same time (DualPipeV's; a forward with a B or I on the other chunk, placement v only). Before anything runs the grid is checked (every microbatch's
// F, then B or I then W, exactly once per chunk, in microbatch order; the dependencies across
// stages; the simulator's deadlock check) and then lowered to transfers like the built-in
// zero-bubble schedules (pipeline/schedule.h's add_communication_in_time_order).
// A file may also hold PyTorch's compute-only schedule CSV (pipeline/pytorch_csv.h, told apart by
// its content), read into the same grid and checked and lowered the same way; its overlapped pair
// "(0F7;7B3)OVERLAP_F_B" is our "F7&B3.1".
#pragma once
#include <string>
#include <vector>

#include "pipeline/schedule.h"

struct ScheduleGrid {
  PlacementKind placement;
  std::vector<std::vector<Action>> stages;  // each stage's compute order
};

// Throws std::runtime_error naming the line and what is wrong with it.
ScheduleGrid parse_schedule_grid(const std::string& text);

// The grid checked for p stages and m microbatches, and lowered. Throws std::runtime_error
// ("schedule error: stage 1 step 5 runs W3 before I3", then the grid with that step marked) when
// it does not fit: another number of stages, a microbatch outside [0, m), a compute missing,
// repeated or out of order, an input that never comes, computes that wait for each other.
// Each chunk's forwards, and its gradient-adding computes (B and W), must run in microbatch
// order, as in every built-in schedule: then every schedule adds the losses and the gradients in
// the same order and gives bitwise the same step.
PipelineSchedule schedule_from_grid(const ScheduleGrid& grid, int p, int m);

// The text form: the placement line (for v only) and the grid.
std::string schedule_grid_text(const PipelineSchedule& schedule);
