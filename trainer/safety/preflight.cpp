// Checks before the first step of what a run needs later (trainer/safety/preflight.h).
#include "trainer/safety/preflight.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The data holds at least one microbatch's window (trainer/data/data.h's make_batch_reader rule).
void check_holds_a_microbatch(const std::string& what, const TokenDataset& data, int B, int T) {
  const size_t needed = size_t(B) * T + 1;
  if (data.tokens.size() < needed)
    throw std::runtime_error(what + ": " + data.source + " holds " + std::to_string(data.tokens.size()) +
                             " tokens, fewer than one microbatch reads (B*T+1 = " + std::to_string(needed) + ")");
}

}  // namespace

void check_directory_writable(const std::string& flag, const std::string& path) {
  const std::string directory = directory_of(path);
  // Named after the process: ranks of one node probing one directory do not collide.
  const std::string probe = directory + "/.train-probe-" + std::to_string(getpid());
  std::FILE* file = std::fopen(probe.c_str(), "w");
  if (file == nullptr)
    throw std::runtime_error(flag + " " + path + ": cannot write in " + directory + ": " + std::strerror(errno));
  std::fclose(file);
  std::remove(probe.c_str());
}

void check_run_outputs_and_data(const TrainOptions& options, const TrainValSplit& data, int B, int T) {
  if (!options.save.empty()) check_directory_writable("--save", options.save);
  if (!options.log.empty()) check_directory_writable("--log", options.log);
  check_holds_a_microbatch("training data", data.train, B, T);
  if (options.val_every > 0) check_holds_a_microbatch("--val-every " + std::to_string(options.val_every), data.val, B, T);
}

std::optional<Tokenizer> load_sample_tokenizer(const TrainOptions& options, TokenFormat format, int vocab_size) {
  if (options.sample_every == 0 && options.tokenizer.empty()) return std::nullopt;
  if (!options.tokenizer.empty()) return sample_tokenizer(format, vocab_size, options.tokenizer);  // errors name the file
  try {
    return sample_tokenizer(format, vocab_size, options.tokenizer);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error("--sample-every " + std::to_string(options.sample_every) + ": " + error.what());
  }
}
