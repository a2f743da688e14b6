// --sequence-parallel (issue 33 items 4, 5, model/gpt_sequence_parallel.cu): the residual stream of
// a stage sharded over its tp ranks, checked against the options it needs when the options are
// parsed (trainer/command_line/options.cpp).
#pragma once

// Throws std::runtime_error with one line naming the option, when sequence_parallel is set: tp of 1
// (nothing to shard over), or a --seq-len that tp does not divide (a rank's shard is B T / tp rows).
// Every named schedule runs with it, the split backward's too
// (model/gpt_split_backward_sequence_parallel.cu), and a --schedule-file; with --documents and
// --seq-len-warmup every microbatch's length is rounded up to a multiple of tp
// (trainer/data/documents.h), so tp divides each T as it divides --seq-len.
void check_sequence_parallel_options(bool sequence_parallel, int tp, int seq_len);
