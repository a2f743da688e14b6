// Where a run's model comes from and where it goes: GPT-2 initialisation from the flags, an
// llm.c checkpoint (--init), or a checkpoint with our state file (--resume); and saving both
// files (--save) with everything that decides the rest of the run.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/checkpoint_format.h"
#include "model/config.h"
#include "trainer/command_line/options.h"
#include "trainer/step/trainer.h"

// The state of a run that is not in the model file and that a resumed run needs to continue
// bitwise: the optimizer's moments live in the trainer, these beside them.
struct RunPosition {
  int step = 0;                  // optimizer steps done
  uint64_t data_position = 0;    // the training reader's next microbatch
  uint64_t sampler_state = 0;    // the sampler's random generator
};

struct StartingPoint {
  GPTConfig config;
  std::vector<float> parameters;  // num_parameters(config), llm.c's order
  std::string description;        // where they came from, and how --dtype took them, for the run's banner
  uint64_t rounding_seed = 0;     // bf16 stochastic rounding's: --seed, or the resumed run's
  bool resumed = false;           // the fields below are valid
  RunPosition position;
  std::vector<float> m, v;        // AdamW moments
  std::vector<float> master;      // a bf16 run's fp32 master weights; empty: none
};

// The model config the flags describe (without --init or --resume): vocabulary from --vocab or
// the training data, maxT = --seq-len.
GPTConfig config_from_flags(const TrainOptions& options);

// From --resume, --init or the flags. A checkpoint's config comes from its header; the flags the
// user gave explicitly (--layers, --heads, --dim, --vocab) must agree with it and a given --seq-len
// must not exceed its maxT, else a one-line error names the file and the field. A state file whose config
// or random generator disagrees with the model file is rejected the same way. --init reads an fp32
// (version 3) or bf16 (version 5) file whatever --dtype is (the trainer rounds fp32 values to
// nearest bf16, and bf16 values widen exactly; the description says which). --resume continues a
// run bitwise, so its model file must be of --dtype's version and its state file must hold master
// weights exactly when --dtype bf16 keeps them (--master-weights); else one line says what to give.
StartingPoint load_starting_point(const TrainOptions& options);
// Only the config load_starting_point would start from, with the same checks of a file's header
// against the flags, without reading parameters or a state file (the memory plan's).
GPTConfig starting_config(const TrainOptions& options);

// T of the run: --seq-len when given (load_starting_point checked it against maxT), else the
// default capped at the model's maxT (a checkpoint may have fewer positions).
int sequence_length(const TrainOptions& options, const GPTConfig& config);

// Writes the llm.c model file at path (version 3 for fp32 parameters, 5 for bf16 ones: their
// bits) and the state file next to it (with a bf16 run's master weights and rounding seed), each
// atomically, from world rank 0 after gathering the stages of replica 0. Every rank calls it; it
// returns on every rank once the files are written.
template <typename Element>
void save_checkpoint(const std::string& path, const Trainer<Element>& trainer, const RunPosition& position);
