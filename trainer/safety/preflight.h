// What a run will need after its first step, checked before it: a run that trains for hours and
// then cannot write its checkpoint, read its validation data or decode a sample has lost those
// hours. Each check throws std::runtime_error with one line naming the option and the problem.
// Every rank runs them, before the ranks communicate, so that a bad setting ends every rank at
// once with the same line (trainer/program/run.h's prepare_run).
#pragma once
#include <optional>
#include <string>

#include "trainer/data/data.h"
#include "trainer/command_line/options.h"
#include "trainer/data/tokenizer.h"

// The directory of path (its parent, "." for a bare name) exists and a file can be created and
// removed in it: a probe file named after this process, removed at once. flag names the option.
void check_directory_writable(const std::string& flag, const std::string& path);

// --save's and --log's directories are writable; the training data holds at least one microbatch
// (B T + 1 tokens) and, when validation runs (--val-every > 0), the validation data too.
void check_run_outputs_and_data(const TrainOptions& options, const TrainValSplit& data, int B, int T);

// The tokenizer samples will decode with (--sample-every > 0, or --tokenizer given): read now, so
// that a missing or wrong file fails before training. Empty when neither is asked for.
std::optional<Tokenizer> load_sample_tokenizer(const TrainOptions& options, TokenFormat format, int vocab_size);
