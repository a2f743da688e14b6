// Checkpoints: llm.c's model file, read and written exactly as llm.c does, and our own
// training-state file that --resume needs besides the model (optimizer moments, a bf16 run's
// fp32 master weights, step, data position, RNG state, stochastic rounding's seed). Both are
// written atomically (model/atomic_file.h); every malformed file is rejected with one line
// naming the file and the field.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/config.h"

// llm.c's model file: a header of 256 int32 — [0] magic, [1] version, [2] maxT, [3] V,
// [4] L, [5] NH, [6] C, [7] Vp, the rest 0 — then the 16 tensors in llm.c's order
// (model/parameters.h), fp32 (version 3) or bf16 (version 5), little-endian.
constexpr int kModelFileMagic = 20240326;
constexpr int kModelFileVersionFp32 = 3;
constexpr int kModelFileVersionBf16 = 5;
constexpr size_t kModelFileHeaderInts = 256;

enum class CheckpointDtype { fp32, bf16 };

struct ModelFile {
  GPTConfig config;
  CheckpointDtype dtype;          // as stored in the file
  std::vector<float> parameters;  // num_parameters(config), llm.c's order; bf16 widened exactly
};

// Throws std::runtime_error "<path>: ..." when the file cannot be read, is shorter than
// the header, has another magic or version, a header field that validate_gpt_config
// rejects, or a size other than the header plus exactly the tensors it describes.
// With read_parameters false, the checks are the same but parameters stays empty (a plan needs
// only the config: a GPT-2 124M file is 500 MB).
ModelFile read_model_file(const std::string& path, bool read_parameters = true);

// parameters: num_parameters(config) values. bf16 rounds each to nearest even, as
// PyTorch's .bfloat16() does for llm.c's files.
void write_model_file(const std::string& path, const GPTConfig& config, const std::vector<float>& parameters,
                      CheckpointDtype dtype);

// Checks a model file's config against the one the flags describe; throws e.g.
// "model.bin: header channels 768 disagrees with --dim 512". Layers, heads, channels and
// vocabulary must be equal; flags.max_seq_len is the training sequence length
// (--seq-len), which may be shorter than the file's maxT but not longer.
void check_model_config_against_flags(const std::string& path, const GPTConfig& header, const GPTConfig& flags);

// Everything besides the parameters that a resumed run needs to continue bitwise.
struct TrainingState {
  GPTConfig config;            // the model the state belongs to
  int64_t step = 0;            // optimizer steps done
  uint64_t data_position = 0;  // where the data loader continues
  uint64_t rounding_seed = 0;  // the seed of bf16 parameters' stochastic rounding (trainer/step/optimizer.h)
  std::vector<uint64_t> rng;   // random generator state, as many words as the trainer keeps
  std::vector<float> m, v;     // AdamW moments, num_parameters(config) each, llm.c's order
  std::vector<float> master;   // a bf16 run's fp32 master weights, num_parameters(config); empty: none
};

// The state file of a model file: "<model_path>.state".
std::string training_state_path(const std::string& model_path);

// Training-state file: a header of 64 int64 — [0] kTrainingStateMagic, [1] version,
// [2..7] maxT, V, L, NH, C, Vp as in llm.c's header, [8] step, [9] data position,
// [10] RNG words, [11] parameters, [12] master weights (1: they follow v, 0: none),
// [13] the rounding seed, the rest 0 — then the RNG words (uint64), m, v and the master
// weights if any (fp32), little-endian. Version 1 (before bf16 training) is version 2 with
// words 12 and 13 zero, and is read as such.
constexpr int64_t kTrainingStateMagic = 20261122;
constexpr int64_t kTrainingStateVersion = 2;
constexpr size_t kTrainingStateHeaderWords = 64;

// Throws like read_model_file; also when step is negative, the parameter count is not
// that of the config, or the master weights word is neither 0 nor 1.
TrainingState read_training_state(const std::string& path);
// m and v must hold num_parameters(state.config) values each, master as many or none.
void write_training_state(const std::string& path, const TrainingState& state);

// Throws e.g. "run.bin.state: header channels 512 disagrees with the model file's 768"
// for the first of the six fields that differs.
void check_state_config_against_model(const std::string& path, const GPTConfig& state, const GPTConfig& model);
