// Starting a run from the flags, --init or --resume, and saving checkpoints (trainer/checkpoints/save_and_resume.h).
#include "trainer/checkpoints/save_and_resume.h"

#include <algorithm>
#include <stdexcept>
#include <type_traits>

#include "model/parameters.h"
#include "trainer/checkpoints/gather_model.h"
#include "trainer/data/data.h"

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

const char* dtype_name(CheckpointDtype dtype) { return dtype == CheckpointDtype::bf16 ? "bf16" : "fp32"; }

int file_version(CheckpointDtype dtype) {
  return dtype == CheckpointDtype::bf16 ? kModelFileVersionBf16 : kModelFileVersionFp32;
}

// "llm.c checkpoint m.bin (fp32, version 3), rounded to nearest bf16", and what --init did.
std::string init_description(const std::string& path, CheckpointDtype stored, const std::string& dtype) {
  std::string text = "llm.c checkpoint " + path + " (" + dtype_name(stored) + ", version " +
                     std::to_string(file_version(stored)) + ")";
  if (dtype != dtype_name(stored))
    text += stored == CheckpointDtype::fp32 ? ", rounded to nearest bf16" : ", widened to fp32";
  return text;
}

// A resumed run continues the saved one: the same element type, master weights or not.
void check_resume_precision(const std::string& path, CheckpointDtype stored, const std::string& state_path,
                            const TrainingState& state, const TrainOptions& options) {
  if (options.dtype != dtype_name(stored))
    throw std::runtime_error(path + ": " + dtype_name(stored) + " checkpoint (version " +
                             std::to_string(file_version(stored)) + ") resumes with --dtype " + dtype_name(stored) +
                             " (--init starts a new run from it with --dtype " + options.dtype + ")");
  const bool wanted = options.dtype == "bf16" && options.master_weights;
  if (state.master.empty() && wanted)
    throw std::runtime_error(state_path + ": holds no master weights (saved with --master-weights 0); resume with "
                             "--master-weights 0");
  if (!state.master.empty() && !wanted)
    throw std::runtime_error(state_path + ": holds fp32 master weights; resume with --master-weights 1");
}

}  // namespace

GPTConfig config_from_flags(const TrainOptions& options) {
  const int vocab = options.vocab > 0 ? options.vocab : default_vocab_size(options.train_data);
  return make_gpt_config(options.layers, options.heads, options.dim, options.seq_len, vocab);
}

GPTConfig starting_config(const TrainOptions& options) {
  if (options.resume.empty() && options.init.empty()) return config_from_flags(options);
  const std::string& path = options.resume.empty() ? options.init : options.resume;
  return checked_header_config(path, read_model_file(path, false).config, options);
}

StartingPoint load_starting_point(const TrainOptions& options) {
  StartingPoint start;
  if (options.resume.empty() && options.init.empty()) {
    start.config = config_from_flags(options);
    init_gpt2_parameters(start.parameters, start.config, options.seed);
    start.description = "GPT-2 initialisation, seed " + std::to_string(options.seed) +
                        (options.dtype == "bf16" ? ", rounded to nearest bf16" : "");
    start.rounding_seed = options.seed;
    return start;
  }
  const std::string& path = options.resume.empty() ? options.init : options.resume;
  ModelFile model = read_model_file(path);
  start.config = checked_header_config(path, model.config, options);
  start.parameters = std::move(model.parameters);
  start.rounding_seed = options.seed;
  if (options.resume.empty()) {
    start.description = init_description(path, model.dtype, options.dtype);
    return start;
  }
  const std::string state_path = training_state_path(path);
  TrainingState state = read_training_state(state_path);
  check_state_config_against_model(state_path, state.config, start.config);
  check_resume_precision(path, model.dtype, state_path, state, options);
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
  start.master = std::move(state.master);
  start.rounding_seed = state.rounding_seed;
  start.description = "resumed from " + path + " at step " + std::to_string(state.step);
  return start;
}

int sequence_length(const TrainOptions& options, const GPTConfig& config) {
  return options.given.count("seq-len") ? options.seq_len : std::min(options.seq_len, config.max_seq_len);
}

template <typename Element>
void save_checkpoint(const std::string& path, const Trainer<Element>& trainer, const RunPosition& position) {
  // Every rank: with ZeRO-1 the optimizer state is in shards over the replicas.
  TrainingState state;
  gather_moments(trainer, state.m, state.v);
  state.master = gather_master_weights(trainer);
  if (trainer.groups.mesh.dp_rank == 0) {
    // bf16 parameters come widened to float, which the version 5 file rounds back exactly.
    const std::vector<float> parameters = gather_parameters(trainer);
    if (trainer.world.rank == 0) {
      constexpr bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
      write_model_file(path, trainer.config, parameters, bf16 ? CheckpointDtype::bf16 : CheckpointDtype::fp32);
      state.config = trainer.config;
      state.step = position.step;
      state.data_position = position.data_position;
      state.rounding_seed = trainer.optimizer.rounding_seed;
      state.rng = {position.sampler_state};
      write_training_state(training_state_path(path), state);
    }
  }
  // So that no rank reads the files (a resume in the same process) before they are written.
  wait_for_world(trainer.world);
}

template void save_checkpoint<float>(const std::string&, const Trainer<float>&, const RunPosition&);
template void save_checkpoint<__nv_bfloat16>(const std::string&, const Trainer<__nv_bfloat16>&, const RunPosition&);
