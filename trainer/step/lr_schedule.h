// The learning rate of each optimizer step: a linear warm-up from 0 to --lr, then either a
// cosine decay to --min-lr at the last step or the constant --lr.
#pragma once
#include "trainer/command_line/options.h"

struct LrSchedule {
  double peak;    // --lr, reached at the end of the warm-up
  double floor;   // --min-lr, reached at step `steps` by the cosine decay
  int warmup;     // steps of linear warm-up
  int steps;      // the run's length; the cosine decay ends here
  bool cosine;    // false: constant after the warm-up
};

LrSchedule lr_schedule_from_options(const TrainOptions& options);

// The rate of step s = 0, 1, ... (the (s+1)-th update):
//   s < warmup:  peak * s / warmup                        (0 at step 0)
//   cosine:      floor + (peak - floor) (1 + cos(pi r)) / 2, r = (s - warmup) / (steps - warmup),
//                clamped to [0, 1] so that a resumed run beyond `steps` stays at the floor
//   constant:    peak
double learning_rate(const LrSchedule& schedule, int step);
