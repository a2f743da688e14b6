// The options of the tests' tiny training run: a 2-layer, 16-wide model on the given text file,
// 10 steps, nothing periodic switched on. A test changes what its property needs.
#pragma once

#include <string>

#include "trainer/command_line/options.h"

inline TrainOptions tiny_run_options(const std::string& text_file) {
  TrainOptions options;
  options.train_data = text_file;
  options.layers = 2;
  options.heads = 2;
  options.dim = 16;
  options.seq_len = 16;
  options.batch = 2;
  options.microbatches = 2;
  options.steps = 10;
  options.warmup = 2;
  options.lr = 3e-3f;
  options.val_every = 0;
  options.sample_every = 0;
  return options;
}
