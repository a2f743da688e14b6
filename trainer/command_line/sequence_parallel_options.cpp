// --sequence-parallel's checks (trainer/command_line/sequence_parallel_options.h).
#include "trainer/command_line/sequence_parallel_options.h"

#include <stdexcept>
#include <string>

void check_sequence_parallel_options(bool sequence_parallel, int tp, int seq_len) {
  if (!sequence_parallel) return;
  if (tp < 2)
    throw std::runtime_error(
        "--sequence-parallel needs --tp 2 or more (it shards each stage's tokens over its tp ranks)");
  if (seq_len % tp != 0)
    throw std::runtime_error("--sequence-parallel: --tp " + std::to_string(tp) + " does not divide --seq-len " +
                             std::to_string(seq_len) + " (each tp rank holds B T / tp tokens)");
}
