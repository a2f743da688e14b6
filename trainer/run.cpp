// One training run on one rank of the mesh (trainer/run.h).
#include "trainer/run.h"

#include <chrono>
#include <cstdarg>
#include <memory>
#include <optional>

#include "model/parameters.h"
#include "pipeline/simulate.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
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

// Frees the trainer's device memory however the run ends.
struct TrainerDeleter {
  void operator()(Trainer* trainer) const {
    destroy_trainer(*trainer);
    delete trainer;
  }
};

// The same for the communicators, which every rank destroys together.
struct GroupsDeleter {
  void operator()(CommGroups* groups) const {
    destroy_world_groups(*groups);
    delete groups;
  }
};

bool every(int interval, int step) { return interval > 0 && step % interval == 0; }

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

}  // namespace

RunSetup prepare_run(const TrainOptions& options) {
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
  const TrainOptions& options = setup.options;
  const StartingPoint& start = setup.start;
  const GPTConfig& config = start.config;
  const Mesh& mesh = setup.mesh;
  const int B = setup.B, T = setup.T;
  BatchReader train_reader = make_batch_reader(setup.data.train, B, T, options.shuffle, options.seed);
  std::optional<BatchReader> val_reader;
  if (options.val_every > 0) val_reader = make_batch_reader(setup.data.val, B, T, false, options.seed);
  std::optional<Tokenizer> tokenizer;
  if (options.sample_every > 0)
    tokenizer = sample_tokenizer(setup.data.train.format, config.vocab_size, options.tokenizer);
  std::optional<StepLog> log;
  if (!options.log.empty() && mesh.world_rank == 0) log.emplace(options.log, start.resumed);

  say(out, "model: L=%d NH=%d C=%d maxT=%d V=%d (Vp=%d), %zu parameters, %s\n", config.num_layers,
      config.num_heads, config.channels, config.max_seq_len, config.vocab_size, config.padded_vocab_size,
      num_parameters(config), start.description.c_str());
  say(out, "data: %s, %zu training tokens, %zu validation tokens (%s)\n", options.train_data.c_str(),
      setup.data.train.tokens.size(), setup.data.val.tokens.size(), setup.data.val.source.c_str());
  say(out, "batch: %d microbatches x B=%d x T=%d x dp=%d = %zu tokens per step, %d steps\n", options.microbatches, B,
      T, mesh.dp, size_t(options.microbatches) * B * T * mesh.dp, options.steps);
  say(out, "pipeline: dp=%d x pp=%d, %s schedule, v=%d, recompute %s\n", mesh.dp, mesh.pp, options.schedule.c_str(),
      options.virtual_stages, options.recompute ? "on" : "off");
  for (size_t i = 0; i < setup.virtual_stages.size(); ++i)
    say(out, "  stage %zu chunk %zu: %s\n", i % mesh.pp, i / mesh.pp, layers_text(setup.virtual_stages[i]).c_str());

  std::unique_ptr<CommGroups, GroupsDeleter> groups(new CommGroups(create_world_groups(mesh)));
  std::unique_ptr<Trainer, TrainerDeleter> trainer(
      new Trainer(create_trainer(config, B, T, setup.layout, *groups)));
  upload_parameters(*trainer, start.parameters);
  RunPosition position{0, 0, sampler_seed_state(options.seed)};
  if (start.resumed) {
    upload_moments(*trainer, start.m, start.v);
    position = start.position;
    train_reader.next_microbatch = position.data_position;
  }

  const LrSchedule schedule = lr_schedule_from_options(options);
  const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, options.grad_clip};
  const double tokens_per_step = double(options.microbatches) * B * T * mesh.dp;
  RunResult result;
  while (position.step < options.steps) {
    const double lr = learning_rate(schedule, position.step);
    const auto begin = std::chrono::steady_clock::now();
    const StepResult step = train_step(*trainer, train_reader, settings, lr, position.step + 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    position.step += 1;
    position.data_position = train_reader.next_microbatch;

    StepRecord record{position.step, options.steps, step.loss, false, 0.0, lr, step.grad_norm,
                      seconds * 1e3, tokens_per_step / seconds, step.stages};
    if (val_reader && (every(options.val_every, position.step) || position.step == options.steps)) {
      record.has_val_loss = true;
      record.val_loss = validation_loss(*trainer, *val_reader, options.val_batches);
    }
    say(out, "%s\n", format_step_line(record).c_str());
    if (mesh.world_size > 1) say(out, "  %s\n", format_stages_line(record.stages).c_str());
    if (log) log->write(record);
    result.steps.push_back(record);

    if (tokenizer && every(options.sample_every, position.step)) {
      const int start_token = sample_start_token(setup.data.train.format, *tokenizer, config.vocab_size);
      const std::vector<int> tokens = generate_tokens(*trainer, start_token, options.sample_len,
                                                      options.sample_temperature, position.sampler_state);
      const std::string text = decode(*tokenizer, tokens.data() + 1, tokens.size() - 1);
      say(out, "sample after step %d:\n%s\n---\n", position.step, printable(text).c_str());
      result.samples.push_back(text);
    }
    if (!options.save.empty() && (every(options.save_every, position.step) || position.step == options.steps)) {
      save_checkpoint(options.save, *trainer, position);
      say(out, "saved %s and %s\n", options.save.c_str(), training_state_path(options.save).c_str());
    }
  }
  return result;
}

RunResult run_training(const TrainOptions& options, std::FILE* out) { return run_training(prepare_run(options), out); }
