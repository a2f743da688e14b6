// The train program's command line: long GNU-style options (--name value or --name=value) into a
// TrainOptions with defaults, checked for range, and the --help text that lists each with its default.
#pragma once
#include <cstdint>
#include <set>
#include <string>
#include <vector>

struct TrainOptions {
  // data
  std::string train_data = "data/kjv.txt";  // text file, or a glob of llm.c shards ending in .bin
  std::string val_data;                     // empty: the last 5% of train_data
  std::string tokenizer;                    // llm.c tokenizer file for samples of shard data (optional)
  // model
  std::string init;  // llm.c checkpoint to start from (empty: GPT-2 initialisation from seed)
  int layers = 4;
  int heads = 4;
  int dim = 128;
  int seq_len = 64;
  int vocab = 0;  // 0: the data's (256 for text, 50257 for shards) or the --init checkpoint's
  std::string dtype = "fp32";  // fp32 | bf16 (llm.c's mixed precision: docs/training.md)
  int master_weights = 1;      // bf16: 1 keeps fp32 master weights (llm.c's -w), 0 only the bf16 parameters
  bool no_tf32 = false;        // fp32: GEMMs in full fp32 instead of on TF32 tensor cores (docs/training.md)
  std::string attention = "auto";  // auto | fused | materialized (layout_from_options resolves auto) (model/attention_kind.h)
  // batch and schedule of the learning rate
  int batch = 8;         // sequences per microbatch
  int microbatches = 4;  // microbatches per step (gradient accumulation)
  int steps = 2000;
  float lr = 3e-3f;
  std::string lr_schedule = "cosine";  // cosine | constant
  float min_lr = 3e-4f;                // the floor of the cosine decay
  int warmup = 20;                     // steps of linear warm-up
  // AdamW and clipping
  float weight_decay = 0.1f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float grad_clip = 1.0f;  // largest global gradient norm; 0: no clipping
  // validation, samples, checkpoints, logging
  int val_every = 100;  // 0: never
  int val_batches = 8;
  int sample_every = 200;  // 0: never
  int sample_len = 128;
  // Softmax temperature of samples: 1 draws from the model's distribution (llm.c's
  // samples); below 1 favours likely tokens (0.8 is nanoGPT's default).
  float sample_temperature = 0.8f;
  std::string save;    // llm.c model file to write (and its state file next to it); empty: none
  int save_every = 0;  // 0: only at the end, if save is given
  std::string resume;  // model file written by --save whose state file to continue from
  uint64_t seed = 1337;
  bool shuffle = false;
  // variable-length data (issue 34, trainer/command_line/document_options.h)
  bool documents = false;        // sequences end at document boundaries; seq_len is the maximum T
  int seq_len_warmup = 0;        // steps over which the step's T grows to seq_len; 0: none
  int seq_len_warmup_start = 8;  // the warm-up's first T
  std::string log;  // JSON lines, one per step; empty: none
  // what watches the run (docs/training.md, "When things go wrong")
  int timeout = 300;    // seconds a schedule step may take before the watchdog ends the run; 0: none
  int max_skipped = 5;  // consecutive steps skipped for a non-finite loss or gradient before the run stops
  // pipeline and data parallelism (issue 5)
  int pp = 0;                     // pipeline stages; 0: world size / dp
  int dp = 1;                     // data-parallel replicas
  int tp = 1;                     // tensor-parallel ranks per stage (issue 33: world = dp x tp x pp)
  bool sequence_parallel = false;  // tp > 1: each stage's tokens sharded over its tp ranks (sequence_parallel_options.h)
  std::string schedule = "1f1b";  // afab | 1f1b | interleaved | zb-h1 | zb-h2 | zb-v | v-half | v-min | looped-bfs | zb-interleaved | dualpipev | pipedream
  std::string schedule_file;      // a compute grid to run instead of --schedule (pipeline/schedule_file.h)
  int virtual_stages = 1;         // model chunks per rank (interleaved; zb-v runs 2)
  int microbatch_group = 0;       // interleaved: microbatches each chunk runs in a row (N); 0: pp
  bool recompute = false;
  // PipeDream's asynchronous pipeline (issue 37, trainer/command_line/pipedream_options.h)
  int update_every = 1;                 // backwards per update (K)
  std::string weight_stashing = "on";   // on | off: a backward uses its forward's weights, or the latest
  bool vertical_sync = false;           // every stage uses stage 0's version for a microbatch
  int zero = 0;  // 1: ZeRO-1, the optimizer state sharded over the dp replicas (docs/pipeline.md)
  std::vector<int> layers_per_stage;  // empty: an even split
  bool layers_per_stage_auto = false;  // --layers-per-stage auto: measured (trainer/program/auto_layer_split.h)
  std::string pipeline_layout;        // "Et*3|t*3L" (pipeline/layout_string.h); empty: --layers-per-stage's split
  bool print_schedule = false;
  std::vector<double> schedule_costs = {1, 1, 1, 0};  // --print-schedule's t_f, t_i, t_w and message latency
  std::string pair_cost = "sum";  // --print-schedule's time of an overlapped pair: sum | max (pipeline/simulate.h)
  std::string schedule_format = "grid";  // --print-schedule's output: grid | pytorch-csv (pipeline/pytorch_csv.h)
  bool print_memory = false;  // the memory plan's table (pipeline/memory_plan.h), then exit
  uint64_t memory_limit = 0;  // bytes each rank may plan for; 0: the device's free memory less a margin
  int world = 0;              // --print-memory, --plan-layouts: the world size to plan for; 0: mpirun's
  bool plan_layouts = false;  // rank the layouts of the world by predicted step time (trainer/program/layout_advisor.h)
  std::string costs;          // --plan-layouts: a --trace run's JSON to take the action costs from; empty: FLOPs
  std::string trace;   // Chrome trace-event JSON of a step's measured timeline (--print-schedule: the predicted one)
  int trace_step = 0;  // the step --trace records; 0: the last
  bool help = false;
  // The names of the options given on the command line (e.g. "layers"), so that the trainer can
  // tell a chosen value from a default, as when comparing with an --init checkpoint.
  std::set<std::string> given;
};

// Parses argv[1..argc) and checks each value's range and the options' consistency. Throws
// std::runtime_error with one line naming the option: unknown, missing or unexpected value,
// malformed number, out of range. --help sets help and returns without further checks.
TrainOptions parse_train_options(int argc, const char* const* argv);
// The --help text: usage, then every option with its value, meaning and default.
std::string train_options_help();
// Whether --name (without the dashes) is an option that takes a value (false for a switch or an
// unknown name): how a command line given back to the user is split into its options.
bool option_takes_value(const std::string& name);
