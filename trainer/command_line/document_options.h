// The options of the variable-length data mode (issue 34, docs/training.md "Variable-length
// data"): --documents, --seq-len-warmup STEPS and --seq-len-warmup-start N, checked against each
// other and --seq-len when the options are parsed (trainer/command_line/options.cpp).
#pragma once
#include <set>
#include <string>

// Throws std::runtime_error with one line naming the option: a warm-up start of 0 or above
// --seq-len, or a start without a warm-up.
void check_document_options(int warmup_start, int seq_len, const std::set<std::string>& given);
