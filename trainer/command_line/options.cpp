// Parsing and checking the train program's options. One table lists every option: its name, its
// value, what it means, how it is parsed into TrainOptions and how its default is shown, so that
// --help and the parser cannot disagree.
#include "trainer/command_line/options.h"
#include "trainer/command_line/layer_split_options.h"
#include "trainer/command_line/document_options.h"
#include "trainer/command_line/option_values.h"
#include "trainer/command_line/pipedream_options.h"
#include "trainer/command_line/sequence_parallel_options.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <stdexcept>
#include <string_view>

namespace {

struct OptionSpec {
  std::string name;   // without the leading "--"
  std::string value;  // what the value is, for --help; empty for a switch, which takes none
  std::string help;
  std::function<void(TrainOptions&, const std::string& flag, const std::string& value)> set;
  std::function<std::string(const TrainOptions&)> show;  // the value as --help shows a default
};

OptionSpec int_option(const char* name, int TrainOptions::*field, Bounds bounds, const char* help) {
  return {name, "N", help,
          [field, bounds](TrainOptions& options, const std::string& flag, const std::string& text) {
            const int value = parse_integer<int>(flag, text);
            check_bounds(flag, text, value, bounds);
            options.*field = value;
          },
          [field](const TrainOptions& options) { return std::to_string(options.*field); }};
}

OptionSpec float_option(const char* name, float TrainOptions::*field, Bounds bounds, const char* help) {
  return {name, "X", help,
          [field, bounds](TrainOptions& options, const std::string& flag, const std::string& text) {
            const float value = parse_float(flag, text);
            check_bounds(flag, text, value, bounds);
            options.*field = value;
          },
          [field](const TrainOptions& options) { return show_float(options.*field); }};
}

OptionSpec string_option(const char* name, const char* value_name, std::string TrainOptions::*field, const char* help) {
  return {name, value_name, help,
          [field](TrainOptions& options, const std::string& flag, const std::string& text) {
            if (text.empty()) throw std::runtime_error(flag + " needs a non-empty value");
            options.*field = text;
          },
          [field](const TrainOptions& options) { return (options.*field).empty() ? "none" : options.*field; }};
}

OptionSpec choice_option(const char* name, std::string TrainOptions::*field, std::vector<std::string> choices,
                         const char* help) {
  std::string value_name;
  for (const std::string& choice : choices) value_name += (value_name.empty() ? "" : "|") + choice;
  return {name, value_name, help,
          [field, choices, value_name](TrainOptions& options, const std::string& flag, const std::string& text) {
            for (const std::string& choice : choices) {
              if (text == choice) {
                options.*field = text;
                return;
              }
            }
            throw std::runtime_error(flag + " " + text + " is not one of " + value_name);
          },
          [field](const TrainOptions& options) { return options.*field; }};
}

OptionSpec switch_option(const char* name, bool TrainOptions::*field, const char* help) {
  return {name, "", help,
          [field](TrainOptions& options, const std::string&, const std::string&) { options.*field = true; },
          [field](const TrainOptions& options) { return std::string(options.*field ? "on" : "off"); }};
}

OptionSpec seed_option() {
  return {"seed", "N", "seed of the initialisation, the shuffle and the samples",
          [](TrainOptions& options, const std::string& flag, const std::string& text) {
            options.seed = parse_integer<uint64_t>(flag, text);
          },
          [](const TrainOptions& options) { return std::to_string(options.seed); }};
}

// --layers-per-stage N,N,... or auto (trainer/command_line/layer_split_options.h).
OptionSpec layers_per_stage_option() {
  return {"layers-per-stage", "N,N,...|auto",
          "layers of each pipeline stage, first to last (none: an even split; auto: balanced by measured layer times)",
          [](TrainOptions& options, const std::string& flag, const std::string& text) {
            const LayersPerStage parsed = parse_layers_per_stage(flag, text, [&](const std::string& item) {
              const int count = parse_integer<int>(flag, item);
              check_bounds(flag, text, count, kAtLeastZero);
              return count;
            });
            options.layers_per_stage = parsed.counts;
            options.layers_per_stage_auto = parsed.automatic;
          },
          [](const TrainOptions& options) {
            return layers_per_stage_text({options.layers_per_stage, options.layers_per_stage_auto});
          }};
}

// --schedule-costs TF,TI,TW[,LATENCY]: the simulator's costs of a forward, an input gradient and a
// weight gradient of one chunk, and of a message.
OptionSpec schedule_costs_option() {
  return {"schedule-costs", "TF,TI,TW[,LAT]",
          "--print-schedule's costs of F, I and W of a chunk (B = I + W) and a message's latency",
          [](TrainOptions& options, const std::string& flag, const std::string& text) {
            std::vector<double> costs;
            for (size_t begin = 0;;) {
              const size_t comma = text.find(',', begin);
              const std::string item = text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin);
              const float cost = parse_float(flag, item);
              check_bounds(flag, text, cost, costs.empty() ? kAboveZero : kAtLeastZero);
              costs.push_back(cost);
              if (comma == std::string::npos) break;
              begin = comma + 1;
            }
            if (costs.size() < 3 || costs.size() > 4)
              throw std::runtime_error(flag + " " + text + " needs 3 or 4 numbers: TF,TI,TW[,LATENCY]");
            costs.resize(4, 0.0);
            options.schedule_costs = costs;
          },
          [](const TrainOptions& options) {
            std::string list;
            for (double cost : options.schedule_costs) list += (list.empty() ? "" : ",") + show_float(float(cost));
            return list;
          }};
}

// --memory-limit BYTES: an integer with an optional binary suffix, K, M, G, T or P (2^10 to 2^50).
// From 1M to 1P: below a MiB nothing trains, above a PiB no device holds it (a typo).
OptionSpec memory_limit_option() {
  return {"memory-limit", "BYTES",
          "device memory each rank may plan for, K/M/G/T/P suffixes (none: the device's free memory less a margin)",
          [](TrainOptions& options, const std::string& flag, const std::string& text) {
            const std::string suffixes = "KMGTP";
            const size_t unit = text.empty() ? std::string::npos : suffixes.find(char(std::toupper(text.back())));
            const std::string digits = unit == std::string::npos ? text : text.substr(0, text.size() - 1);
            uint64_t value = 0;
            const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
            if (error == std::errc::result_out_of_range) throw std::runtime_error(flag + " " + text + " is too large");
            if (error != std::errc() || end != digits.data() + digits.size() || digits.empty())
              throw std::runtime_error(flag + ": '" + text + "' is not a byte count (an integer, optionally with K, M, G, T or P)");
            const int shift = unit == std::string::npos ? 0 : 10 * (int(unit) + 1);
            const long double bytes = std::ldexp((long double)value, shift);
            if (bytes < std::ldexp(1.0L, 20) || bytes > std::ldexp(1.0L, 50))
              throw std::runtime_error(flag + " " + text + " is out of range (must be from 1M to 1P)");
            options.memory_limit = uint64_t(bytes);
          },
          [](const TrainOptions& options) {
            return options.memory_limit == 0 ? std::string("none") : std::to_string(options.memory_limit);
          }};
}

const std::vector<OptionSpec>& option_table() {
  using O = TrainOptions;
  static const std::vector<OptionSpec> table = {
      string_option("train-data", "PATH", &O::train_data,
                    "text file (one token per byte) or glob of llm.c shards ending in .bin"),
      string_option("val-data", "PATH", &O::val_data,
                    "validation data like --train-data (none: the last 5% of --train-data)"),
      string_option("tokenizer", "FILE", &O::tokenizer, "llm.c tokenizer file to decode samples of shard data"),
      string_option("init", "FILE", &O::init, "llm.c checkpoint to start from (none: GPT-2 initialisation)"),
      int_option("layers", &O::layers, kAtLeastOne, "transformer layers L"),
      int_option("heads", &O::heads, kAtLeastOne, "attention heads NH"),
      int_option("dim", &O::dim, kAtLeastOne, "channels C"),
      int_option("seq-len", &O::seq_len, kAtLeastOne, "tokens per sequence T"),
      int_option("vocab", &O::vocab, kAtLeastZero,
                 "vocabulary size V (0: --init's, else 256 for text, 50257 for shards)"),
      choice_option("dtype", &O::dtype, {"fp32", "bf16"},
                    "element type of parameters, gradients, activations and messages (bf16: fp32 moments)"),
      int_option("master-weights", &O::master_weights, kZeroOrOne,
                 "with --dtype bf16: 1 keeps an fp32 copy of the parameters for the updates, 0 does not"),
      switch_option("no-tf32", &O::no_tf32,
                    "fp32 GEMMs in full fp32, not on TF32 tensor cores (inputs rounded to 10 mantissa bits)"),
      choice_option("attention", &O::attention, {"auto", "fused", "materialized"},
                    "the blocks' attention: fused (FlashAttention-2) keeps a log-sum-exp per row, materialized "
                    "the T x T probabilities; auto is fused where the head size is a multiple of 16 up to 128"),
      int_option("batch", &O::batch, kAtLeastOne, "sequences per microbatch B"),
      int_option("microbatches", &O::microbatches, kAtLeastOne, "microbatches per step (gradient accumulation)"),
      int_option("steps", &O::steps, kAtLeastZero, "optimizer steps"),
      float_option("lr", &O::lr, kAboveZero, "peak learning rate"),
      choice_option("lr-schedule", &O::lr_schedule, {"cosine", "constant"}, "decay after the warm-up"),
      float_option("min-lr", &O::min_lr, kAtLeastZero, "learning rate at the end of the cosine decay"),
      int_option("warmup", &O::warmup, kAtLeastZero, "steps of linear warm-up"),
      float_option("weight-decay", &O::weight_decay, kAtLeastZero, "AdamW weight decay (matrices and embeddings)"),
      float_option("beta1", &O::beta1, kZeroToBelowOne, "AdamW beta1"),
      float_option("beta2", &O::beta2, kZeroToBelowOne, "AdamW beta2"),
      float_option("eps", &O::eps, kAboveZero, "AdamW epsilon"),
      float_option("grad-clip", &O::grad_clip, kAtLeastZero, "largest global gradient norm (0: no clipping)"),
      int_option("val-every", &O::val_every, kAtLeastZero, "steps between validation losses (0: never)"),
      int_option("val-batches", &O::val_batches, kAtLeastOne, "microbatches per validation loss"),
      int_option("sample-every", &O::sample_every, kAtLeastZero, "steps between text samples (0: never)"),
      int_option("sample-len", &O::sample_len, kAtLeastOne, "tokens per sample"),
      float_option("sample-temperature", &O::sample_temperature, kAboveZero,
                   "softmax temperature of samples (1: the model's own distribution)"),
      string_option("save", "FILE", &O::save, "llm.c model file to write, with our state file next to it"),
      int_option("save-every", &O::save_every, kAtLeastZero, "steps between checkpoints (0: only at the end)"),
      string_option("resume", "FILE", &O::resume, "model file written by --save to continue from"),
      seed_option(),
      switch_option("shuffle", &O::shuffle, "read the training data in a seeded order of chunks"),
      // variable-length data (issue 34)
      switch_option("documents", &O::documents,
                    "end each sequence at a document boundary (a chapter, or llm.c's end-of-text token), each "
                    "microbatch padded to its longest: --seq-len is the maximum T"),
      int_option("seq-len-warmup", &O::seq_len_warmup, kAtLeastZero,
                 "steps over which the step's T grows linearly to --seq-len (0: none): packed sequences cut to it, "
                 "or document-aligned ones with --documents"),
      int_option("seq-len-warmup-start", &O::seq_len_warmup_start, kAtLeastZero,
                 "the warm-up's first T (then rounded down to multiples of 8, never below it)"),
      string_option("log", "FILE", &O::log, "JSON lines, one per step"),
      int_option("timeout", &O::timeout, kAtLeastZero,
                 "seconds a schedule step may take before the run ends, naming it (0: no watchdog)"),
      int_option("max-skipped", &O::max_skipped, kAtLeastOne,
                 "consecutive steps skipped for a non-finite loss or gradient before the run stops"),
      int_option("pp", &O::pp, kAtLeastZero, "pipeline stages (0: world size / dp)"),
      int_option("dp", &O::dp, kAtLeastOne, "data-parallel replicas"),
      int_option("tp", &O::tp, kAtLeastOne, "tensor-parallel ranks per stage (must divide the heads, 4 C and Vp)"),
      switch_option("sequence-parallel", &O::sequence_parallel,
                    "with --tp: LayerNorms and residuals on T / tp tokens per tp rank (Megatron's sequence parallelism)"),
      choice_option("schedule", &O::schedule,
                    {"afab", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "v-half", "v-min", "looped-bfs",
                     "zb-interleaved", "dualpipev", "pipedream"},
                    "pipeline schedule"),
      int_option("update-every", &O::update_every, kAtLeastOne,
                 "pipedream: backwards per weight update (must divide --microbatches)"),
      choice_option("weight-stashing", &O::weight_stashing, {"on", "off"},
                    "pipedream: a backward uses its forward's weights (on) or the latest (off)"),
      switch_option("vertical-sync", &O::vertical_sync,
                    "pipedream: every stage uses, for a microbatch, the weight version stage 0 used"),
      string_option("schedule-file", "FILE", &O::schedule_file,
                    "run the compute grid in FILE (as --print-schedule prints it) instead of --schedule"),
      int_option("virtual-stages", &O::virtual_stages, kAtLeastOne,
                 "model chunks per rank (interleaved, looped-bfs; zb-interleaved: 2 or more; zb-v, v-half, v-min, dualpipev: 2)"),
      int_option("microbatch-group", &O::microbatch_group, kAtLeastOne,
                 "interleaved: consecutive microbatches each chunk runs (N, from pp to --microbatches; 0: pp)"),
      switch_option("recompute", &O::recompute, "keep only stage inputs; recompute activations before backward"),
      int_option("zero", &O::zero, kZeroOrOne,
                 "1: shard the AdamW moments and master weights over the dp replicas (ZeRO-1), 0: do not"),
      layers_per_stage_option(),
      string_option("pipeline-layout", "STRING", &O::pipeline_layout,
                    "E, t and L of each virtual stage, '|' between, X*N repeats (docs/pipeline.md)"),
      switch_option("print-schedule", &O::print_schedule, "print the schedule's grid, bubble and memory, then exit"),
      schedule_costs_option(),
      choice_option("pair-cost", &O::pair_cost, {"sum", "max"},
                    "--print-schedule's time of an overlapped pair (dualpipev): the two costs' sum (one GPU's SMs "
                    "shared) or the longer one"),
      choice_option("format", &O::schedule_format, {"grid", "pytorch-csv"},
                    "with --print-schedule: the grid, timeline and memory, or only PyTorch's compute-only CSV"),
      switch_option("print-memory", &O::print_memory,
                    "print each rank's planned device memory, item by item, then exit (allocates nothing)"),
      memory_limit_option(),
      int_option("world", &O::world, kAtLeastOne,
                 "with --print-memory or --plan-layouts: plan for this many ranks (0, the default: mpirun's)"),
      switch_option("plan-layouts", &O::plan_layouts,
                    "rank the layouts of the world's ranks that fit the device memory by predicted step time, then exit"),
      string_option("costs", "FILE", &O::costs,
                    "with --plan-layouts: the action costs measured in a --trace run's JSON of this model (none: FLOPs)"),
      string_option("trace", "FILE", &O::trace,
                    "write a step's measured timeline as Chrome trace JSON (--print-schedule: the predicted one)"),
      int_option("trace-step", &O::trace_step, kAtLeastZero, "the step --trace records (0: the last)"),
      switch_option("help", &O::help, "print this help and exit"),
  };
  return table;
}

const OptionSpec* find_option(std::string_view name) {
  for (const OptionSpec& spec : option_table()) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// The options given that --schedule pipedream does not run with yet (trainer/command_line/pipedream_options.h).
std::vector<std::string> pipedream_not_built(const TrainOptions& options) {
  std::vector<std::string> named;
  if (options.tp > 1) named.push_back("--tp " + std::to_string(options.tp));
  if (options.zero == 1) named.push_back("--zero 1");
  return named;
}

// Checks between options, once all are parsed.
void check_consistency(const TrainOptions& options) {
  if (options.lr_schedule == "cosine" && options.min_lr > options.lr) {
    throw std::runtime_error("--min-lr " + show_float(options.min_lr) + " is above --lr " + show_float(options.lr));
  }
  if (options.save_every > 0 && options.save.empty()) throw std::runtime_error("--save-every needs --save FILE");
  if (!options.init.empty() && !options.resume.empty()) {
    throw std::runtime_error("--init and --resume exclude each other (--resume restores the model)");
  }
  if (options.dtype == "fp32" && options.master_weights == 0) {
    throw std::runtime_error("--master-weights 0 needs --dtype bf16 (fp32 parameters are their own master weights)");
  }
  if (options.dtype == "bf16" && options.no_tf32)
    throw std::runtime_error("--no-tf32 needs --dtype fp32 (bf16 GEMMs take bf16 inputs, never TF32)");
  const bool file = !options.schedule_file.empty();
  if (file && options.given.count("schedule")) throw std::runtime_error("--schedule-file and --schedule exclude each other");
  if (file && options.given.count("virtual-stages"))
    throw std::runtime_error("--schedule-file and --virtual-stages exclude each other (the file's chunks say it)");
  const bool v_shape = options.schedule == "zb-v" || options.schedule == "v-half" || options.schedule == "v-min" ||
                       options.schedule == "dualpipev";
  if (v_shape && options.given.count("virtual-stages") && options.virtual_stages != 2)
    throw std::runtime_error("--virtual-stages " + std::to_string(options.virtual_stages) +
                             " does not fit --schedule " + options.schedule + ", which runs 2 chunks per rank");
  if (options.schedule == "zb-interleaved" && options.virtual_stages < 2)
    throw std::runtime_error("--schedule zb-interleaved needs --virtual-stages 2 or more (chunks per rank); got " +
                             std::to_string(options.virtual_stages));
  const bool interleaves =
      options.schedule == "interleaved" || options.schedule == "zb-interleaved" || options.schedule == "looped-bfs";
  if (options.virtual_stages > 1 && !interleaves && !v_shape) {
    throw std::runtime_error("--virtual-stages " + std::to_string(options.virtual_stages) +
                             " needs --schedule interleaved");
  }
  if (options.given.count("microbatch-group") && options.schedule != "interleaved")
    throw std::runtime_error("--microbatch-group needs --schedule interleaved");
  if (options.given.count("trace-step") && options.trace.empty()) throw std::runtime_error("--trace-step needs --trace FILE");
  if (!options.print_schedule && options.trace_step > options.steps)
    throw std::runtime_error("--trace-step " + std::to_string(options.trace_step) + " is after the last step (--steps " +
                             std::to_string(options.steps) + ")");
  if (options.given.count("world") && !options.print_memory && !options.plan_layouts)
    throw std::runtime_error("--world needs --print-memory or --plan-layouts (a run's world is mpirun's)");
  if (options.given.count("costs") && !options.plan_layouts) throw std::runtime_error("--costs needs --plan-layouts");
  if (options.plan_layouts && (options.print_memory || options.print_schedule))
    throw std::runtime_error("--plan-layouts excludes --print-memory and --print-schedule");
  if (options.plan_layouts && (file || !options.layers_per_stage.empty() || !options.pipeline_layout.empty()))
    throw std::runtime_error("--plan-layouts chooses the schedule and the split: it excludes --schedule-file, "
                             "--layers-per-stage and --pipeline-layout");
  if (!options.layers_per_stage.empty() && !options.pipeline_layout.empty())
    throw std::runtime_error("--layers-per-stage and --pipeline-layout both give the split: pass one");
  check_layer_split_options(options.layers_per_stage_auto, !options.pipeline_layout.empty(), options.plan_layouts,
                            options.print_memory);
  check_pipedream_options(options.schedule == "pipedream", options.vertical_sync, options.grad_clip,
                          pipedream_not_built(options), options.given);
  // A recompute needs the version its forward used; without stashing only the latest is kept, and a
  // forward run again with it would give other activations than the rule's backward reads.
  if (options.schedule == "pipedream" && options.recompute && options.weight_stashing == "off")
    throw std::runtime_error("--schedule pipedream with --recompute needs weight stashing (without it the forward's "
                             "weight version is gone when its activations are recomputed): drop --weight-stashing off "
                             "or --recompute");
  check_document_options(options.seq_len_warmup_start, options.seq_len, options.given);
  check_sequence_parallel_options(options.sequence_parallel, options.tp, options.seq_len);
  if (options.given.count("schedule-costs") && !options.print_schedule)
    throw std::runtime_error("--schedule-costs needs --print-schedule");
  if (options.given.count("format") && !options.print_schedule)
    throw std::runtime_error("--format needs --print-schedule");
  if (options.schedule_format == "pytorch-csv" && !options.trace.empty())
    throw std::runtime_error("--format pytorch-csv excludes --trace (stdout then holds the CSV alone)");
}

// The messages quote what the user typed; a control character in it (a newline, an escape) would
// break the one line a message is, or the terminal, so each is shown as '?'.
std::string one_line(std::string text) {
  for (char& c : text)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return text;
}

TrainOptions parse_arguments(int argc, const char* const* argv) {
  TrainOptions options;
  for (int i = 1; i < argc; i++) {
    const std::string_view argument = argv[i];
    if (argument == "--help" || argument == "-h") {
      options.help = true;
      return options;
    }
  }
  for (int i = 1; i < argc; i++) {
    const std::string argument = argv[i];
    if (argument.rfind("--", 0) != 0) {
      throw std::runtime_error("unexpected argument '" + argument + "' (options start with --; see --help)");
    }
    const size_t equals = argument.find('=');
    const std::string name = argument.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const std::string flag = "--" + name;
    const OptionSpec* spec = find_option(name);
    if (spec == nullptr) throw std::runtime_error("unknown option " + flag + " (see --help)");
    std::string value;
    if (spec->value.empty()) {
      if (equals != std::string::npos) throw std::runtime_error(flag + " takes no value");
    } else if (equals != std::string::npos) {
      value = argument.substr(equals + 1);
    } else {
      // A following option is not taken as the value: "--save --shuffle" forgot the file name.
      if (i + 1 == argc || std::string_view(argv[i + 1]).rfind("--", 0) == 0) {
        throw std::runtime_error(flag + " needs a value (" + spec->value + ")");
      }
      value = argv[++i];
    }
    spec->set(options, flag, value);
    options.given.insert(name);
  }
  check_consistency(options);
  return options;
}

}  // namespace

TrainOptions parse_train_options(int argc, const char* const* argv) {
  try {
    return parse_arguments(argc, argv);
  } catch (const std::runtime_error& error) {
    throw std::runtime_error(one_line(error.what()));
  }
}

bool option_takes_value(const std::string& name) {
  const OptionSpec* spec = find_option(name);
  return spec != nullptr && !spec->value.empty();
}

std::string train_options_help() {
  const TrainOptions defaults;
  std::string text =
      "usage: train [--option value | --option=value]...\n"
      "Trains a GPT-2 on --train-data; with mpirun, as a pipeline of --pp stages times --dp replicas.\n\n";
  for (const OptionSpec& spec : option_table()) {
    std::string left = "  --" + spec.name + (spec.value.empty() ? "" : " " + spec.value);
    left.resize(std::max<size_t>(left.size() + 1, 36), ' ');
    text += left + spec.help;
    if (spec.name != "help") text += " (default: " + spec.show(defaults) + ")";
    text += "\n";
  }
  return text;
}
