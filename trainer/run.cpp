// The single-process training run (trainer/run.h).
#include "trainer/run.h"

#include <chrono>
#include <cstdarg>
#include <memory>
#include <optional>

#include "model/parameters.h"
#include "trainer/checkpoints.h"
#include "trainer/data.h"
#include "trainer/lr_schedule.h"
#include "trainer/optimizer.h"
#include "trainer/sampler.h"
#include "trainer/tokenizer.h"
#include "trainer/trainer.h"

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

bool every(int interval, int step) { return interval > 0 && step % interval == 0; }

}  // namespace

RunResult run_training(const TrainOptions& options, std::FILE* out) {
  StartingPoint start = load_starting_point(options);
  const GPTConfig& config = start.config;
  const int B = options.batch, T = sequence_length(options, config);
  const TrainValSplit data = load_data(options, config.vocab_size);
  BatchReader train_reader = make_batch_reader(data.train, B, T, options.shuffle, options.seed);
  std::optional<BatchReader> val_reader;
  if (options.val_every > 0) val_reader = make_batch_reader(data.val, B, T, false, options.seed);
  std::optional<Tokenizer> tokenizer;
  if (options.sample_every > 0) tokenizer = sample_tokenizer(data.train.format, config.vocab_size, options.tokenizer);
  std::optional<StepLog> log;
  if (!options.log.empty()) log.emplace(options.log, start.resumed);

  say(out, "model: L=%d NH=%d C=%d maxT=%d V=%d (Vp=%d), %zu parameters, %s\n", config.num_layers,
      config.num_heads, config.channels, config.max_seq_len, config.vocab_size, config.padded_vocab_size,
      num_parameters(config), start.description.c_str());
  say(out, "data: %s, %zu training tokens, %zu validation tokens (%s)\n", options.train_data.c_str(),
      data.train.tokens.size(), data.val.tokens.size(), data.val.source.c_str());
  say(out, "batch: %d microbatches x B=%d x T=%d = %zu tokens per step, %d steps\n", options.microbatches, B, T,
      size_t(options.microbatches) * B * T, options.steps);

  std::unique_ptr<Trainer, TrainerDeleter> trainer(new Trainer(create_trainer(config, B, T, options.microbatches)));
  upload_parameters(*trainer, start.parameters);
  RunPosition position{0, 0, sampler_seed_state(options.seed)};
  if (start.resumed) {
    upload_moments(trainer->optimizer, start.m, start.v);
    position = start.position;
    train_reader.next_microbatch = position.data_position;
  }

  const LrSchedule schedule = lr_schedule_from_options(options);
  const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, options.grad_clip};
  const double tokens_per_step = double(options.microbatches) * B * T;
  RunResult result;
  while (position.step < options.steps) {
    const double lr = learning_rate(schedule, position.step);
    const auto begin = std::chrono::steady_clock::now();
    const StepResult step = train_step(*trainer, train_reader, settings, lr, position.step + 1);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    position.step += 1;
    position.data_position = train_reader.next_microbatch;

    StepRecord record{position.step, options.steps, step.loss, false, 0.0, lr, step.grad_norm,
                      seconds * 1e3, tokens_per_step / seconds};
    if (val_reader && (every(options.val_every, position.step) || position.step == options.steps)) {
      record.has_val_loss = true;
      record.val_loss = validation_loss(*trainer, *val_reader, options.val_batches);
    }
    say(out, "%s\n", format_step_line(record).c_str());
    if (log) log->write(record);
    result.steps.push_back(record);

    if (tokenizer && every(options.sample_every, position.step)) {
      const int start_token = sample_start_token(data.train.format, *tokenizer, config.vocab_size);
      const std::vector<int> tokens = generate_tokens(*trainer, start_token, options.sample_len, position.sampler_state);
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
