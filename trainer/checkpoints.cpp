// Starting a run from the flags, --init or --resume, and saving checkpoints (trainer/checkpoints.h).
#include "trainer/checkpoints.h"

#include <algorithm>
#include <stdexcept>

#include "model/parameters.h"
#include "trainer/data.h"

namespace {

// The sampler keeps one 64-bit word of random state.
constexpr size_t kRngWords = 1;

// The checkpoint's config, checked against the flags the user gave.
GPTConfig checked_header_config(const std::string& path, const GPTConfig& header, const TrainOptions& options) {
  GPTConfig wanted = header;
  if (options.given.count("layers")) wanted.num_layers = options.layers;
  if (options.given.count("heads")) wanted.num_heads = options.heads;
  if (options.given.count("dim")) wanted.channels = options.dim;
  if (options.given.count("vocab")) wanted.vocab_size = options.vocab;
  if (options.given.count("seq-len")) wanted.max_seq_len = options.seq_len;
  check_model_config_against_flags(path, header, wanted);
  return header;
}

}  // namespace

GPTConfig config_from_flags(const TrainOptions& options) {
  const int vocab = options.vocab > 0 ? options.vocab : default_vocab_size(options.train_data);
  return make_gpt_config(options.layers, options.heads, options.dim, options.seq_len, vocab);
}

StartingPoint load_starting_point(const TrainOptions& options) {
  StartingPoint start;
  if (options.resume.empty() && options.init.empty()) {
    start.config = config_from_flags(options);
    init_gpt2_parameters(start.parameters, start.config, options.seed);
    start.description = "GPT-2 initialisation, seed " + std::to_string(options.seed);
    return start;
  }
  const std::string& path = options.resume.empty() ? options.init : options.resume;
  ModelFile model = read_model_file(path);
  start.config = checked_header_config(path, model.config, options);
  start.parameters = std::move(model.parameters);
  if (options.resume.empty()) {
    start.description = "llm.c checkpoint " + path;
    return start;
  }
  const std::string state_path = training_state_path(path);
  TrainingState state = read_training_state(state_path);
  check_state_config_against_model(state_path, state.config, start.config);
  if (state.rng.size() != kRngWords) {
    throw std::runtime_error(state_path + ": header RNG words " + std::to_string(state.rng.size()) + " is not " +
                             std::to_string(kRngWords) + " (the sampler's state)");
  }
  if (state.step > int64_t(options.steps)) {
    throw std::runtime_error(state_path + ": header step " + std::to_string(state.step) + " is beyond --steps " +
                             std::to_string(options.steps));
  }
  start.resumed = true;
  start.position = {int(state.step), state.data_position, state.rng[0]};
  start.m = std::move(state.m);
  start.v = std::move(state.v);
  start.description = "resumed from " + path + " at step " + std::to_string(state.step);
  return start;
}

int sequence_length(const TrainOptions& options, const GPTConfig& config) {
  return options.given.count("seq-len") ? options.seq_len : std::min(options.seq_len, config.max_seq_len);
}

void save_checkpoint(const std::string& path, const Trainer& trainer, const RunPosition& position) {
  if (trainer.groups.mesh.dp_rank == 0) {
    const std::vector<float> parameters = gather_parameters(trainer);
    TrainingState state;
    gather_moments(trainer, state.m, state.v);
    if (trainer.world.rank == 0) {
      write_model_file(path, trainer.config, parameters, CheckpointDtype::fp32);
      state.config = trainer.config;
      state.step = position.step;
      state.data_position = position.data_position;
      state.rng = {position.sampler_state};
      write_training_state(training_state_path(path), state);
    }
  }
  // So that no rank reads the files (a resume in the same process) before they are written.
  wait_for_world(trainer.world);
}
