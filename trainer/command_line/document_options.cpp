// The variable-length data mode's options (trainer/command_line/document_options.h).
#include "trainer/command_line/document_options.h"

#include <stdexcept>

void check_document_options(bool documents, int warmup_steps, int warmup_start, int seq_len, int tp,
                            const std::set<std::string>& given) {
  if (given.count("seq-len-warmup-start") && !given.count("seq-len-warmup"))
    throw std::runtime_error("--seq-len-warmup-start needs --seq-len-warmup STEPS");
  if (given.count("seq-len-warmup") && (warmup_start < 1 || warmup_start > seq_len))
    throw std::runtime_error("--seq-len-warmup-start " + std::to_string(warmup_start) + " is not in [1, --seq-len " +
                             std::to_string(seq_len) + "]");
  if (tp > 1 && (documents || warmup_steps > 0))
    throw std::runtime_error(std::string(documents ? "--documents" : "--seq-len-warmup") + " does not run with --tp " +
                             std::to_string(tp) + " yet (issue 34)");
}
