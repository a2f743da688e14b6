// One training run on one rank of the mesh (trainer/run.h).
#include "trainer/run.h"

#include <chrono>
#include <cstdarg>
#include <filesystem>
#include <optional>

#include "model/parameters.h"
#include "pipeline/simulate.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/progress.h"
#include "trainer/ranks.h"
#include "trainer/sampler.h"
#include "trainer/tokenizer.h"

namespace {

void say(std::FILE* out, const char* format, ...) {
  if (out == nullptr) return;
  va_list arguments;
  va_start(arguments, format);
  std::vfprintf(out, format, arguments);
  va_end(arguments);
  std::fflush(out);
}

// The training and validation tokens: --val-data, or the last 5% of --train-data.
TrainValSplit load_data(const TrainOptions& options, int vocab_size) {
  TokenDataset all = load_token_data(options.train_data, vocab_size);
  if (options.val_data.empty()) return split_train_val(all);
  return {std::move(all), load_token_data(options.val_data, vocab_size)};
}

bool every(int interval, int step) { return interval > 0 && step % interval == 0; }

double seconds_since(std::chrono::steady_clock::time_point begin) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
}

// Before reading what may take a while (a model file, token shards), say so: the banner comes
// only after everything is read.
void say_reading(std::FILE* out, const TrainOptions& options) {
  const std::string& model_file = options.resume.empty() ? options.init : options.resume;
  std::error_code no_size;
  const auto size = model_file.empty() ? 0 : std::filesystem::file_size(model_file, no_size);
  if (!model_file.empty() && !no_size) say(out, "reading the model file %s (%.3g MB)\n", model_file.c_str(), size / 1e6);
  for (const std::string& data : {options.train_data, options.val_data})
    if (is_shard_pattern(data)) say(out, "reading the token shards %s\n", data.c_str());
}

// Bytes of one activation slot of a chunk, as the executor allocates it.
size_t slot_bytes(const RunSetup& setup, const LayerRange& range) {
  const GPTConfig& config = setup.start.config;
  return stage_input_bytes<float>(config, setup.B, setup.T, range) +
         (setup.layout.recompute ? 0 : activation_bytes<float>(config, setup.B, setup.T, range));
}

std::string layers_text(const LayerRange& range) {
  std::string text = "layers [" + std::to_string(range.first_layer) + ", " + std::to_string(range.end_layer) + ")";
  if (range.has_embedding) text += " + embedding";
  if (range.has_head) text += " + head";
  return text;
}

// What the step loop reads and writes besides the trainer.
struct RunFiles {
  BatchReader train_reader;
  std::optional<BatchReader> val_reader;
  std::optional<Tokenizer> tokenizer;
  std::optional<StepLog> log;  // world rank 0's
};

void open_run_files(const RunSetup& setup, RunFiles& files) {
  const TrainOptions& options = setup.options;
  files.train_reader = make_batch_reader(setup.data.train, setup.B, setup.T, options.shuffle, options.seed);
  if (options.val_every > 0)
    files.val_reader = make_batch_reader(setup.data.val, setup.B, setup.T, false, options.seed);
  if (options.sample_every > 0)
    files.tokenizer = sample_tokenizer(setup.data.train.format, setup.start.config.vocab_size, options.tokenizer);
  if (!options.log.empty() && setup.mesh.world_rank == 0) files.log.emplace(options.log, setup.start.resumed);
}

// The step loop with validation, samples, checkpoints and logging, on a trainer created for setup.
RunResult run_steps(const RunSetup& setup, Trainer& trainer, RunFiles& files, std::FILE* out) {
  const TrainOptions& options = setup.options;
  const StartingPoint& start = setup.start;
  const GPTConfig& config = start.config;
  const Mesh& mesh = setup.mesh;
  const int B = setup.B, T = setup.T;
  BatchReader& train_reader = files.train_reader;
  std::optional<BatchReader>& val_reader = files.val_reader;
  std::optional<Tokenizer>& tokenizer = files.tokenizer;
  std::optional<StepLog>& log = files.log;

  upload_parameters(trainer, start.parameters);
  RunPosition position{0, 0, sampler_seed_state(options.seed)};
  if (start.resumed) {
    upload_moments(trainer, start.m, start.v);
    position = start.position;
    train_reader.next_microbatch = position.data_position;
  }

  const LrSchedule schedule = lr_schedule_from_options(options);
  const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, options.grad_clip};
  const double tokens_per_step = double(options.microbatches) * B * T * mesh.dp;
  const auto run_begin = std::chrono::steady_clock::now();
  std::vector<double> step_seconds;
  RunResult result;
  while (position.step < options.steps) {
    const double lr = learning_rate(schedule, position.step);
    const auto begin = std::chrono::steady_clock::now();
    const StepResult step = train_step(trainer, train_reader, settings, lr, position.step + 1);
    const double seconds = seconds_since(begin);
    step_seconds.push_back(seconds);
    position.step += 1;
    position.data_position = train_reader.next_microbatch;

    StepRecord record{position.step, options.steps, step.loss, false, 0.0, lr, step.grad_norm,
                      seconds * 1e3, tokens_per_step / seconds, step.stages};
    if (val_reader && (every(options.val_every, position.step) || position.step == options.steps)) {
      record.has_val_loss = true;
      record.val_loss = validation_loss(trainer, *val_reader, options.val_batches);
    }
    say(out, "%s | %s\n", format_step_line(record).c_str(),
        format_progress(seconds_since(run_begin), median(step_seconds), options.steps - position.step).c_str());
    if (mesh.world_size > 1) say(out, "  %s\n", format_stages_line(record.stages).c_str());
    if (log) log->write(record);
    result.steps.push_back(record);

    if (tokenizer && every(options.sample_every, position.step)) {
      const int start_token = sample_start_token(setup.data.train.format, *tokenizer, config.vocab_size);
      const std::vector<int> tokens = generate_tokens(trainer, start_token, options.sample_len,
                                                      options.sample_temperature, position.sampler_state);
      const std::string text = decode(*tokenizer, tokens.data() + 1, tokens.size() - 1);
      say(out, "sample after step %d:\n%s\n---\n", position.step, printable(text).c_str());
      result.samples.push_back(text);
    }
    if (!options.save.empty() && (every(options.save_every, position.step) || position.step == options.steps)) {
      save_checkpoint(options.save, trainer, position);
      say(out, "saved %s and %s\n", options.save.c_str(), training_state_path(options.save).c_str());
    }
  }
  say(out, "%s\n", format_summary_line(result.steps, seconds_since(run_begin), {options.save, options.log}).c_str());
  return result;
}

}  // namespace

RunSetup prepare_run(const TrainOptions& options, std::FILE* out) {
  say_reading(out, options);
  RunSetup setup;
  setup.options = options;
  setup.start = load_starting_point(options);
  const GPTConfig& config = setup.start.config;
  setup.B = options.batch;
  setup.T = sequence_length(options, config);
  const World world = this_world();
  setup.mesh = make_mesh(options.dp, options.pp, world.size, world.rank);
  setup.layout = {parse_schedule_kind(options.schedule), options.microbatches, options.virtual_stages,
                  options.recompute, options.layers_per_stage};
  setup.virtual_stages = check_layout(config, setup.mesh, setup.layout);
  setup.data = load_data(options, config.vocab_size);
  return setup;
}

std::string schedule_report(const RunSetup& setup) {
  const PipelineLayout& layout = setup.layout;
  const int p = setup.mesh.pp, v = layout.virtual_stages, m = layout.microbatches;
  const std::vector<StageSchedule> stages = make_all_schedules(layout.schedule, p, m, v);
  const StepCosts costs{1.0, 2.0, 0.0};
  const Simulation simulation = simulate(stages, costs);
  std::string report = schedule_name(layout.schedule) + " schedule, p = " + std::to_string(p) +
                       ", m = " + std::to_string(m) + ", v = " + std::to_string(v) +
                       (layout.recompute ? ", recompute" : "") + "\n\n" + format_grid(stages) + "\n" +
                       "timeline (t_f = 1 column, t_b = 2, no latency):\n" +
                       format_timeline(stages, simulation, costs) + "\n";
  char line[256];
  std::snprintf(line, sizeof(line), "predicted makespan %.0f t_f\n", simulation.makespan);
  report += line;
  for (int s = 0; s < p; ++s) {
    size_t largest_slot = 0, working = 0;
    std::string layers;
    for (int c = 0; c < v; ++c) {
      const LayerRange& range = setup.virtual_stages[c * p + s];
      largest_slot = std::max(largest_slot, slot_bytes(setup, range));
      if (layout.recompute) working += activation_bytes<float>(setup.start.config, setup.B, setup.T, range);
      layers += (c ? ", " : "") + layers_text(range);
    }
    const StageSimulation& stage = simulation.stages[s];
    const double bytes = double(stage.peak_in_flight) * largest_slot + working;
    std::snprintf(line, sizeof(line), "stage %d: idle %.3f, peak %d in flight x %zu B%s = %.0f B (%s)\n", s,
                  stage.idle_share, stage.peak_in_flight, largest_slot,
                  layout.recompute ? " + working set" : "", bytes, layers.c_str());
    report += line;
  }
  return report;
}

RunResult run_training(const RunSetup& setup, std::FILE* out) {
  const GPTConfig& config = setup.start.config;
  const TrainOptions& options = setup.options;
  const Mesh& mesh = setup.mesh;
  RunFiles files;
  open_run_files(setup, files);
  say(out, "model: L=%d NH=%d C=%d maxT=%d V=%d (Vp=%d), %zu parameters, %s\n", config.num_layers,
      config.num_heads, config.channels, config.max_seq_len, config.vocab_size, config.padded_vocab_size,
      num_parameters(config), setup.start.description.c_str());
  say(out, "data: %s, %zu training tokens, %zu validation tokens (%s)\n", options.train_data.c_str(),
      setup.data.train.tokens.size(), setup.data.val.tokens.size(), setup.data.val.source.c_str());
  say(out, "batch: %d microbatches x B=%d x T=%d x dp=%d = %zu tokens per step, %d steps\n", options.microbatches,
      setup.B, setup.T, mesh.dp, size_t(options.microbatches) * setup.B * setup.T * mesh.dp, options.steps);
  say(out, "pipeline: dp=%d x pp=%d, %s schedule, v=%d, recompute %s\n", mesh.dp, mesh.pp, options.schedule.c_str(),
      options.virtual_stages, options.recompute ? "on" : "off");
  for (size_t i = 0; i < setup.virtual_stages.size(); ++i)
    say(out, "  stage %zu chunk %zu: %s\n", i % mesh.pp, i / mesh.pp, layers_text(setup.virtual_stages[i]).c_str());

  CommGroups groups = create_world_groups(mesh);
  Trainer trainer;
  RunResult result;
  try {
    trainer = create_trainer(config, setup.B, setup.T, setup.layout, groups);
    result = run_steps(setup, trainer, files, out);
  } catch (...) {
    // This rank's error, perhaps its alone, while its peers wait on it in a transfer. Its
    // communicators are aborted, not destroyed: a destroy would wait for those peers. Its device
    // memory is left allocated on purpose: on a GPU, cudaFree synchronises the device, which
    // waits for every receive already queued on its stream, and the peer that should send may
    // never come. The process ends next (trainer/main.cu), which frees it all.
    abort_world_groups(groups);
    throw;
  }
  destroy_trainer(trainer);
  destroy_world_groups(groups);
  return result;
}

RunResult run_training(const TrainOptions& options, std::FILE* out) {
  return run_training(prepare_run(options, out), out);
}
