// The variable-length data mode's options (trainer/command_line/document_options.h).
#include "trainer/command_line/document_options.h"

#include <stdexcept>

void check_document_options(int warmup_start, int seq_len, const std::set<std::string>& given) {
  if (given.count("seq-len-warmup-start") && !given.count("seq-len-warmup"))
    throw std::runtime_error("--seq-len-warmup-start needs --seq-len-warmup STEPS");
  if (given.count("seq-len-warmup") && (warmup_start < 1 || warmup_start > seq_len))
    throw std::runtime_error("--seq-len-warmup-start " + std::to_string(warmup_start) + " is not in [1, --seq-len " +
                             std::to_string(seq_len) + "]");
}
