// What a run reports after each step: the human line on stdout and, with --log FILE, one
// JSON object per line for scripts.
#pragma once
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/step/stage_record.h"

struct StepRecord {
  int step;             // steps done, 1..steps
  int steps;            // the run's total
  double loss;          // mean training loss of the step
  bool has_val_loss;    // validation ran after this step
  double val_loss;
  double lr;
  double grad_norm;     // before clipping
  double ms;            // wall time of the step
  double tokens_per_s;  // the step's real tokens (B T microbatches dp at fixed length) over its wall time
  std::vector<StageRecord> stages;  // replica 0's stages, in order
  std::string skipped;  // why the step was not applied (the non-finite guard), else empty
  int seq_len = 0;      // --documents: the step's largest T (the warm-up's); 0: fixed length
  double padding = 0;   // --documents: the share of the step's positions that are padding
  bool has_norm = true;  // false: the step computed no norm (--schedule pipedream), none shown
};

// "step 12/300 | loss 2.4817 | lr 3.0e-04 | norm 0.84 | 412 ms | 9.9k tok/s" (no norm without one), with
// " | val 2.5012" after the loss when validation ran, " | T 64 | padding 1.2%" after the tokens
// with --documents, and " | skipped: non-finite gradient (...)" at the end when the step was not applied.
std::string format_step_line(const StepRecord& record);

// "stages | 0: idle 21% act 1.2MB dev 40.1MB | 1: ...", one entry per stage.
std::string format_stages_line(const std::vector<StageRecord>& stages);

// {"step": 12, "loss": 2.4817..., "val_loss": ... (only when computed), "lr": ..., "grad_norm": ... (likewise),
//  "ms": ..., "tokens_per_s": ..., "seq_len": ..., "padding": ... (only with --documents), "stages": [{"stage": 0, "idle": 0.21, "activation_bytes": ...,
//  "device_bytes": ...}, ...], "skipped": "..." (only when skipped)}, numbers with enough digits to
//  read back the doubles exactly (printf's nan and inf when not finite, as tools/compare_losses.py reads them).
std::string format_step_json(const StepRecord& record);

// The --log file: appended to when a run resumes, else started afresh. Throws naming the path
// when it cannot be opened. Each line is flushed, so a crashed run keeps its steps.
class StepLog {
 public:
  StepLog(const std::string& path, bool append);
  StepLog(const StepLog&) = delete;
  StepLog& operator=(const StepLog&) = delete;
  ~StepLog();
  void write(const StepRecord& record);

 private:
  std::FILE* file_ = nullptr;
};
