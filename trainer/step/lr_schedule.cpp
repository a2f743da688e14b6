// The learning-rate schedule (trainer/step/lr_schedule.h).
#include "trainer/step/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

LrSchedule lr_schedule_from_options(const TrainOptions& options) {
  return {options.lr, options.min_lr, options.warmup, options.steps, options.lr_schedule == "cosine"};
}

double learning_rate(const LrSchedule& schedule, int step) {
  if (step < schedule.warmup) return schedule.peak * step / schedule.warmup;
  if (!schedule.cosine) return schedule.peak;
  const int decay_steps = schedule.steps - schedule.warmup;
  const double progress = decay_steps > 0 ? std::clamp(double(step - schedule.warmup) / decay_steps, 0.0, 1.0) : 1.0;
  return schedule.floor + (schedule.peak - schedule.floor) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}
