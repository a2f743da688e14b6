// Elapsed time, time left and the run's summary line (trainer/program/progress.h).
#include "trainer/program/progress.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/checkpoint_format.h"

namespace {

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

}  // namespace

std::string format_duration(double seconds) {
  const long whole = std::lround(std::max(seconds, 0.0));
  char text[32];
  if (whole < 60) {
    std::snprintf(text, sizeof(text), "%lds", whole);
  } else if (whole < 3600) {
    std::snprintf(text, sizeof(text), "%ldm%02lds", whole / 60, whole % 60);
  } else {
    std::snprintf(text, sizeof(text), "%ldh%02ldm", whole / 3600, whole / 60 % 60);
  }
  return text;
}

double median(std::vector<double> values) {
  if (values.empty()) return 0.0;
  const size_t middle = values.size() / 2;
  std::nth_element(values.begin(), values.begin() + middle, values.end());
  if (values.size() % 2 == 1) return values[middle];
  return (values[middle] + *std::max_element(values.begin(), values.begin() + middle)) / 2;
}

double seconds_left(const WorkLeft& left) {
  return left.steps * left.step_seconds + left.validations * left.validation_seconds +
         left.samples * left.sample_seconds;
}

int scheduled_in(int interval, int done, int steps, bool at_last) {
  if (done >= steps) return 0;
  const int every = interval > 0 ? steps / interval - done / interval : 0;
  const bool last_extra = at_last && !(interval > 0 && steps % interval == 0);
  return every + (last_extra ? 1 : 0);
}

// The work after `done` steps: what is left of the steps, validations (every val_every steps and
// at the last) and samples (every sample_every steps; the one after step `done` is still to come
// when the line is printed), each at its median cost so far. Before the first validation or
// sample has run its cost is a prior from the step's: a forward is about a third of a forward
// and backward, a validation is val_batches microbatches' forwards, a sample sample_len forwards
// of one of a microbatch's B sequences.
WorkLeft work_left(const TrainOptions& options, int done, bool validating, bool sampling,
                   const std::vector<double>& step_seconds, const std::vector<double>& validation_seconds,
                   const std::vector<double>& sample_seconds, int B) {
  const double step = median(step_seconds);
  const double forward_of_microbatch = step / options.microbatches / 3;
  WorkLeft left;
  left.steps = options.steps - done;
  left.step_seconds = step;
  left.validations = validating ? scheduled_in(options.val_every, done, options.steps, true) : 0;
  left.validation_seconds =
      validation_seconds.empty() ? forward_of_microbatch * options.val_batches : median(validation_seconds);
  left.samples = sampling ? scheduled_in(options.sample_every, done - 1, options.steps, false) : 0;
  left.sample_seconds =
      sample_seconds.empty() ? forward_of_microbatch / B * options.sample_len : median(sample_seconds);
  return left;
}

std::string format_progress(double elapsed_seconds, double seconds_left, int steps_left) {
  std::string text = format_duration(elapsed_seconds) + " elapsed";
  if (steps_left > 0) text += ", ~" + format_duration(seconds_left) + " left";
  return text;
}

std::string format_summary_line(const std::vector<StepRecord>& steps, double wall_seconds, const RunOutputs& outputs) {
  if (steps.empty()) return "done: no steps to do in " + format_duration(wall_seconds);
  const StepRecord& last = steps.back();
  std::string line = "done: " + std::to_string(last.step) + "/" + std::to_string(last.steps) + " steps";
  if (int(steps.size()) != last.step) line += " (" + std::to_string(steps.size()) + " in this run)";
  line += " in " + format_duration(wall_seconds) + " | loss " + format("%.4f", last.loss);
  const StepRecord* last_val = nullptr;
  const StepRecord* best_val = nullptr;
  std::vector<double> tokens_per_s;
  for (const StepRecord& step : steps) {
    tokens_per_s.push_back(step.tokens_per_s);
    if (!step.has_val_loss) continue;
    last_val = &step;
    if (best_val == nullptr || step.val_loss < best_val->val_loss) best_val = &step;
  }
  if (last_val != nullptr) {
    line += " | val " + format("%.4f", last_val->val_loss) + ", best " + format("%.4f", best_val->val_loss) +
            " at step " + std::to_string(best_val->step);
  }
  const double median_tokens = median(tokens_per_s);
  line += " | median " + (median_tokens >= 1e3 ? format("%.1fk", median_tokens / 1e3) : format("%.0f", median_tokens)) +
          " tok/s";
  if (outputs.checkpoint.empty()) {
    line += " | no checkpoint (--save FILE)";
  } else if (outputs.saved_step < 0) {
    line += " | " + outputs.checkpoint + " not written by this run";
  } else {
    line += " | saved " + outputs.checkpoint + " and " + training_state_path(outputs.checkpoint);
    if (steps.empty() || outputs.saved_step != steps.back().step) line += " at step " + std::to_string(outputs.saved_step);
  }
  line += outputs.log.empty() ? " | no log (--log FILE)" : " | log " + outputs.log;
  return line;
}
