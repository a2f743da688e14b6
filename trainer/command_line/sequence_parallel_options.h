// --sequence-parallel (issue 33 item 4, model/gpt_sequence_parallel.cu): the residual stream of a
// stage sharded over its tp ranks, checked against the options it needs and the ones it does not
// run with yet, when the options are parsed (trainer/command_line/options.cpp).
#pragma once
#include <set>
#include <string>

// Throws std::runtime_error with one line naming the option, when sequence_parallel is set: tp of 1
// (nothing to shard over), a --seq-len that tp does not divide (a rank's shard is B T / tp rows),
// or variable lengths (--documents, --seq-len-warmup: a microbatch's T need not be a multiple of tp).
// Every named schedule runs with it, the split backward's too
// (model/gpt_split_backward_sequence_parallel.cu), and a --schedule-file.
void check_sequence_parallel_options(bool sequence_parallel, int tp, int seq_len,
                                     const std::set<std::string>& given);
