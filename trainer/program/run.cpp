// One training run on one rank of the mesh (trainer/program/run.h).
#include "trainer/program/run.h"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdarg>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

#include "kernels/cublas_check.cuh"
#include "model/parameters.h"
#include "pipeline/pipedream.h"
#include "trainer/step/lr_schedule.h"
#include "trainer/step/optimizer.h"
#include "trainer/safety/preemption.h"
#include "trainer/safety/preflight.h"
#include "trainer/program/pipedream_stop.h"
#include "trainer/program/progress.h"
#include "trainer/program/schedule_report.h"
#include "comm/host_exchange.h"
#include "trainer/program/sampler.h"
#include "trainer/program/auto_layer_split.h"
#include "trainer/program/measured_timeline.h"
#include "trainer/data/documents.h"
#include "trainer/data/tokenizer.h"
#include "trainer/safety/watchdog.h"

namespace {

void say(std::FILE* out, const char* format, ...) {
  if (out == nullptr) return;
  va_list arguments;
  va_start(arguments, format);
  std::vfprintf(out, format, arguments);
  va_end(arguments);
  std::fflush(out);
}

// The training and validation tokens: --val-data, or the last 5% of --train-data. With --documents
// the data's separators are checked as loaded, before the split, whose parts keep no shards: a
// shard without one is named.
TrainValSplit load_data(const TrainOptions& options, int vocab_size) {
  TokenDataset all = load_token_data(options.train_data, vocab_size);
  if (options.documents) document_starts(all);
  if (options.val_data.empty()) return split_train_val(all);
  return {std::move(all), load_token_data(options.val_data, vocab_size)};
}

bool every(int interval, int step) { return interval > 0 && step % interval == 0; }

// The lists through step t (1, 2, ...) and where step t begins in each stage's: the layout's
// schedule from 0, or PipeDream's run through step t, whose forwards may take an input received in
// the step before (pipeline/pipedream.h); a send and its receive always share a step.
std::pair<PipelineSchedule, std::vector<size_t>> lists_through_step(const PipelineLayout& layout, int pp, int t) {
  PipelineSchedule schedule = layout_schedule(layout, pp);
  std::vector<size_t> begin(pp, 0);
  if (!layout.pipedream) return {schedule, begin};
  // The run's own lists (its last step holds the cool-down), joined through step t.
  const std::vector<std::vector<StageSchedule>> steps =
      pipedream_step_schedules(pp, layout.microbatches, layout.pipedream->steps, layout.pipedream->drains);
  for (int s = 0; s < pp; ++s) {
    schedule.stages[s].clear();
    for (int step = 0; step < t; ++step) {
      begin[s] = schedule.stages[s].size();
      schedule.stages[s].insert(schedule.stages[s].end(), steps[step][s].begin(), steps[step][s].end());
    }
  }
  return {schedule, begin};
}

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

bool is_bf16(const RunSetup& setup) { return setup.options.dtype == "bf16"; }

// "resume with --resume FILE (step 12)", or why there is nothing to resume from.
std::string last_checkpoint_text(const TrainOptions& options, int saved_step) {
  if (options.save.empty()) return "nothing saved (no --save)";
  if (saved_step < 0) return "no checkpoint written yet";
  return "resume with --resume " + options.save + " (step " + std::to_string(saved_step) + ")";
}

std::string diverged_message(const TrainOptions& options, int skipped, const std::string& last_reason,
                             int saved_step) {
  return std::to_string(skipped) + " steps in a row skipped (--max-skipped " + std::to_string(options.max_skipped) +
         "), the last for a " + last_reason + ": the run has diverged; lower --lr or use --grad-clip; " +
         last_checkpoint_text(options, saved_step);
}

// What the step loop reads and writes besides the trainer.
struct RunFiles {
  BatchReader train_reader;
  // --documents: the training data's document-aligned reader, which the steps read instead, at
  // the warm-up's T (validation stays packed at maxT).
  std::optional<DocumentReader> document_reader;
  SeqLenWarmup warmup;
  std::optional<BatchReader> val_reader;
  std::optional<Tokenizer> tokenizer;
  std::optional<StepLog> log;  // world rank 0's
};

void open_run_files(const RunSetup& setup, RunFiles& files) {
  const TrainOptions& options = setup.options;
  files.train_reader = make_batch_reader(setup.data.train, setup.B, setup.T, options.shuffle, options.seed);
  if (options.documents)
    files.document_reader = make_document_reader(setup.data.train, setup.B, setup.T, options.shuffle, options.seed,
                                                 length_multiple(setup));
  files.warmup = make_seq_len_warmup(options.seq_len_warmup > 0 ? options.seq_len_warmup_start : setup.T, setup.T,
                                     options.seq_len_warmup, length_multiple(setup));
  if (options.val_every > 0)
    files.val_reader = make_batch_reader(setup.data.val, setup.B, setup.T, false, options.seed);
  if (options.sample_every > 0) files.tokenizer = setup.tokenizer;
  if (!options.log.empty() && setup.mesh.world_rank == 0) files.log.emplace(options.log, setup.start.resumed);
}

// The step loop with validation, samples, checkpoints and logging, on a trainer created for setup;
// what it does goes to activity, for the watchdog.
template <typename Element>
RunResult run_steps(const RunSetup& setup, Trainer<Element>& trainer, RunFiles& files, RunActivity& activity,
                    std::FILE* out) {
  // PipeDream validates and samples only where its pipeline has drained (one weight version, no
  // microbatch in flight): its lists are cut after every step --val-every or --sample-every names
  // (trainer.h's layout_from_options), as after --save-every's.
  const TrainOptions& options = setup.options;
  const StartingPoint& start = setup.start;
  const GPTConfig& config = start.config;
  const Mesh& mesh = setup.mesh;
  const int B = setup.B;
  BatchReader& train_reader = files.train_reader;
  std::optional<BatchReader>& val_reader = files.val_reader;
  std::optional<Tokenizer>& tokenizer = files.tokenizer;
  std::optional<StepLog>& log = files.log;

  upload_parameters(trainer, start.parameters);
  RunPosition position{0, 0, sampler_seed_state(options.seed)};
  if (start.resumed) {
    upload_moments(trainer, start.m, start.v);
    if (!start.master.empty()) upload_master_weights(trainer, start.master);
    position = start.position;
    train_reader.next_microbatch = position.data_position;
    if (files.document_reader) files.document_reader->next_microbatch = position.data_position;
  }

  const LrSchedule schedule = lr_schedule_from_options(options);
  const int traced_step = options.trace.empty() ? 0 : options.trace_step > 0 ? options.trace_step : options.steps;
  bool timeline_written = false;
  const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, options.grad_clip};
  const auto run_begin = std::chrono::steady_clock::now();
  std::vector<double> step_seconds, validation_seconds, sample_seconds;
  RunResult result;
  int skipped_in_a_row = 0;
  int saved_step = start.resumed ? start.position.step : -1;  // the step --save's files hold; -1: none written
  int saved_this_run = -1;  // the last step this run saved (the summary line's)
  PipeDreamStop pipedream_stop;
  trainer.warmup = files.warmup;  // pipedream reads the next steps' microbatches ahead, at their caps
  while (position.step < options.steps) {
    const double lr = learning_rate(schedule, position.step);
    const auto begin = std::chrono::steady_clock::now();
    activity.training_step = position.step + 1;
    activity.phase = kTrainingStepPhase;
    const bool traced = position.step + 1 == traced_step;
    const TimelineStart timeline_start = traced ? start_measured_timeline(trainer) : TimelineStart{};
    // --documents or a warm-up: the warm-up's T caps every sequence of the step (seq_len: 0 at
    // fixed length, where the step line and log show no T).
    const bool capped = files.document_reader || files.warmup.steps > 0;
    const size_t seq_len = capped ? warmup_seq_len(files.warmup, position.step) : 0;
    const StepResult step = files.document_reader
                                ? train_step(trainer, *files.document_reader, seq_len, settings, lr, position.step + 1)
                                : train_step(trainer, train_reader, capped ? seq_len : size_t(setup.T), settings, lr,
                                             position.step + 1);
    if (traced) {
      const auto [lists, step_begin] = lists_through_step(setup.layout, mesh.pp, traced_step - start.position.step);
      write_measured_timeline(trainer, timeline_start, lists, options.trace,
                              trace_about(setup, "the measured timeline of step " + std::to_string(traced_step) +
                                                     "; each rank's times from an event recorded right after a barrier"),
                              step.loss, step_begin);
      say(out, "wrote the timeline of step %d to %s\n", traced_step, options.trace.c_str());
      timeline_written = true;
    }
    const double seconds = seconds_since(begin);
    step_seconds.push_back(seconds);
    position.step += 1;
    position.data_position =
        files.document_reader ? files.document_reader->next_microbatch : train_reader.next_microbatch;

    // Real tokens per second: the padding does not count.
    StepRecord record{position.step, options.steps, step.loss, false, 0.0, lr, step.grad_norm,
                      seconds * 1e3, step.real_tokens / seconds, step.stages, step.skipped};
    record.seq_len = int(seq_len);
    record.padding = 1.0 - step.real_tokens / step.positions;
    record.has_norm = step.has_norm;
    if (val_reader && step.stop.empty() && (every(options.val_every, position.step) || position.step == options.steps)) {
      record.has_val_loss = true;
      activity.phase = "validation";
      const auto validation_begin = std::chrono::steady_clock::now();
      record.val_loss = validation_loss(trainer, *val_reader, options.val_batches);
      validation_seconds.push_back(seconds_since(validation_begin));
    }
    say(out, "%s | %s\n", format_step_line(record).c_str(),
        format_progress(seconds_since(run_begin),
                        seconds_left(work_left(options, position.step, val_reader.has_value(), tokenizer.has_value(),
                                               step_seconds, validation_seconds, sample_seconds, B)),
                        options.steps - position.step)
            .c_str());
    if (mesh.world_size > 1) say(out, "  %s\n", format_stages_line(record.stages).c_str());
    if (log) log->write(record);
    result.steps.push_back(record);
    if (!step.stop.empty()) {  // a model the stages no longer agree on: neither saved nor sampled
      result.exit_status = 1;
      result.error = step.stop + "; " + last_checkpoint_text(options, saved_step);
      break;
    }
    skipped_in_a_row = step.applied ? 0 : skipped_in_a_row + 1;
    if (skipped_in_a_row >= options.max_skipped) {
      result.exit_status = 1;
      result.error = diverged_message(options, skipped_in_a_row, step.skipped, saved_step);
      break;
    }

    if (tokenizer && every(options.sample_every, position.step)) {
      activity.phase = "sampling";
      const auto sample_begin = std::chrono::steady_clock::now();
      const int start_token = sample_start_token(setup.data.train.format, *tokenizer, config.vocab_size);
      const std::vector<int> tokens = generate_tokens(trainer, start_token, options.sample_len,
                                                      options.sample_temperature, position.sampler_state);
      const std::string text = decode(*tokenizer, tokens.data() + 1, tokens.size() - 1);
      sample_seconds.push_back(seconds_since(sample_begin));
      say(out, "sample after step %d:\n%s\n---\n", position.step, printable(text).c_str());
      result.samples.push_back(text);
    }
    // pipedream drains at each --save-every save (its lists are cut there), and for a stop signal
    // at the step pipedream_stop_signal chooses.
    const int stop_signal = pipedream_stop_signal(pipedream_stop, setup, trainer, position.step, step.stop_signal, out);
    const bool stopping = stop_signal != 0;
    if (!options.save.empty() &&
        (every(options.save_every, position.step) || position.step == options.steps || stopping)) {
      if (step.applied) {
        // Writing a large model may rightly take longer than a step: not watched.
        activity.watched = false;
        save_checkpoint(options.save, trainer, position);
        activity.watched = true;
        saved_step = saved_this_run = position.step;
        say(out, "saved %s and %s\n", options.save.c_str(), training_state_path(options.save).c_str());
        if (setup.layout.pipedream)
          say(out, "pipedream: saved with the pipeline drained (no microbatch in flight, one weight version); %s\n",
              position.step < options.steps && !stopping ? "the run warms it up again and goes on"
                                                         : "a resume warms it up again");
      } else {
        // The checkpoint of the last applied step stays: a run that diverges does not overwrite it.
        say(out, "not saved: step %d was skipped; %s\n", position.step, last_checkpoint_text(options, saved_step).c_str());
      }
    }
    if (stopping) {
      say(out, "stopped by %s after step %d of %d; %s\n", stop_signal_name(stop_signal), position.step,
          options.steps, last_checkpoint_text(options, saved_step).c_str());
      result.exit_status = stop_exit_status(stop_signal);
      break;
    }
    activity.phase = "between steps";
  }
  if (traced_step > 0 && !timeline_written)
    say(out, "no timeline written: the run did not do step %d (--trace)\n", traced_step);
  say(out, "%s\n", format_summary_line(result.steps, seconds_since(run_begin), {options.save, options.log, saved_this_run}).c_str());
  return result;
}

// The trainer of the run's element type, its watchdog and its steps. An error goes to fail (with
// the watchdog stopped first, so that only this thread touches the communicators).
template <typename Element>
RunResult train_with(const RunSetup& setup, const CommGroups& groups, RunFiles& files,
                     const std::function<void(const std::string&)>& fail,
                     const std::function<void(const std::string&)>& stuck, std::FILE* out) {
  const Mesh& mesh = setup.mesh;
  Trainer<Element> trainer;
  RunActivity activity;
  Watchdog* watchdog = nullptr;
  RunResult result;
  try {
    trainer = create_trainer<Element>(setup.start.config, setup.B, setup.T, setup.layout, groups,
                                      {setup.options.master_weights == 1, setup.start.rounding_seed});
    if (out) say(out, "%s\n", device_use_line(plan_run_memory(planned_run(setup))[mesh.pp_rank]).c_str());
    // fp32 GEMMs on TF32 tensor cores unless --no-tf32 (kernels/gemm.cuh reads the handle's mode).
    CUBLAS_CHECK(cublasSetMathMode(trainer.cublas, setup.options.no_tf32 ? CUBLAS_DEFAULT_MATH
                                                                         : CUBLAS_TF32_TENSOR_OP_MATH));
    if (setup.options.timeout > 0)
      watchdog = start_watchdog(setup.options.timeout, {mesh.world_rank, mesh.pp_rank, mesh.dp_rank},
                                trainer.executor, activity, stuck);
    result = run_steps(setup, trainer, files, activity, out);
  } catch (const std::exception& error) {
    // This rank's error, perhaps its alone, while its peers wait on it in a transfer. Its
    // communicators are aborted after the report, not destroyed: a destroy would wait for those
    // peers. Its device memory is left allocated on purpose: on a GPU, cudaFree synchronises the
    // device, which waits for every receive already queued on its stream, and the peer that
    // should send may never come. The job ends next, which frees it all.
    stop_watchdog(watchdog);
    fail(error.what());
    throw;
  }
  stop_watchdog(watchdog);
  destroy_trainer(trainer);
  return result;
}

}  // namespace

RunSetup prepare_run(const TrainOptions& options, std::FILE* out) {
  say_reading(options.schedule_format == "pytorch-csv" ? nullptr : out, options);  // the CSV alone on stdout
  RunSetup setup;
  setup.options = options;
  setup.start = load_starting_point(options);
  const GPTConfig& config = setup.start.config;
  setup.B = options.batch;
  setup.T = sequence_length(options, config);
  const World world = this_world();
  setup.mesh = make_mesh(options.dp, options.tp, options.pp, world.size, world.rank);
  check_tensor_parallel_sizes(options.tp, config.num_heads, config.channels, config.padded_vocab_size);
  setup.layout = layout_from_options(options, config);
  // A resumed pipedream run is a run of its own: its checkpoint was saved drained, so its lists
  // warm up again at the step it resumes after (at least one, for a resume past --steps).
  if (setup.layout.pipedream && setup.start.resumed) {
    setup.layout.pipedream->steps = std::max(1, options.steps - setup.start.position.step);
    setup.layout.pipedream->drains = pipedream_drains_every({options.save_every, options.val_every, options.sample_every},
                                                            setup.start.position.step, setup.layout.pipedream->steps);
  }
  try {
    setup.virtual_stages = check_layout(config, setup.mesh, setup.layout);
  } catch (const std::runtime_error& error) {
    if (options.schedule_file.empty()) throw;
    throw std::runtime_error("--schedule-file " + options.schedule_file + ": " + error.what());
  }
  setup.data = load_data(options, config.vocab_size);
  check_run_outputs_and_data(options, setup.data, setup.B, setup.T);
  setup.tokenizer = load_sample_tokenizer(options, setup.data.train.format, config.vocab_size);
  // Last: it measures on every rank together, after every check that could fail on one alone.
  if (options.layers_per_stage_auto) {
    const AutoLayerSplit split = choose_auto_layer_split(setup);
    setup.layout.layers_per_stage = split.counts;
    setup.virtual_stages = check_layout(config, setup.mesh, setup.layout);
    if (options.schedule_format != "pytorch-csv") say(out, "%s", auto_layer_split_text(split).c_str());  // the CSV alone on stdout
  }
  return setup;
}

PlannedRun planned_run(const RunSetup& setup) {
  return {setup.options, setup.start.config, setup.B, setup.T, setup.mesh, setup.layout};
}

std::string rank_failure_line(const Mesh& mesh, const std::string& what) {
  return "train: error: rank " + std::to_string(mesh.world_rank) + " (stage " + std::to_string(mesh.pp_rank) +
         ", replica " + std::to_string(mesh.dp_rank) + ") failed: " + what;
}

RunResult run_training(const RunSetup& setup, std::FILE* out, const FailureHandler& on_failure) {
  const GPTConfig& config = setup.start.config;
  const TrainOptions& options = setup.options;
  const Mesh& mesh = setup.mesh;
  RunFiles files;
  open_run_files(setup, files);
  say(out, "model: L=%d NH=%d C=%d maxT=%d V=%d (Vp=%d), %zu parameters, %s, attention %s\n", config.num_layers,
      config.num_heads, config.channels, config.max_seq_len, config.vocab_size, config.padded_vocab_size,
      num_parameters(config), setup.start.description.c_str(), attention_name(setup.layout.attention));
  if (is_bf16(setup))
    say(out, "precision: bf16 parameters, gradients, activations and messages; fp32 moments%s; stochastic "
        "rounding seed %llu\n", options.master_weights ? " and master weights" : " (no master weights)",
        static_cast<unsigned long long>(setup.start.rounding_seed));
  say(out, "data: %s, %zu training tokens, %zu validation tokens (%s)\n", options.train_data.c_str(),
      setup.data.train.tokens.size(), setup.data.val.tokens.size(), setup.data.val.source.c_str());
  say(out, "batch: %d microbatches x B=%d x T=%d x dp=%d = %zu tokens per step, %d steps\n", options.microbatches,
      setup.B, setup.T, mesh.dp, size_t(options.microbatches) * setup.B * setup.T * mesh.dp, options.steps);
  const std::string rounded =
      length_multiple(setup) == 1 ? "" : ", rounded up to a multiple of tp = " + std::to_string(mesh.tp);
  if (files.document_reader) {
    say(out, "documents: %zu in the training data, sequences end at their boundaries, each microbatch at the T of "
        "its longest%s (at most %d), padding out of the loss and the token counts\n",
        files.document_reader->starts.size(), rounded.c_str(), setup.T);
  }
  if (options.seq_len_warmup > 0)
    say(out, "sequence-length warm-up: T from %d to %d over %d steps, in multiples of 8%s%s\n",
        options.seq_len_warmup_start, setup.T, options.seq_len_warmup, rounded.c_str(),
        files.document_reader ? "" : " (each packed sequence's first T tokens)");
  const Placement placement = layout_schedule(setup.layout, mesh.pp).placement;
  const char* zero = options.zero == 0 ? "" : mesh.dp > 1 ? ", zero 1 (each replica keeps its shard of the optimizer "
                    "state)" : "; note: --zero 1 with dp=1 has nothing to shard: runs as --zero 0";
  const std::string tp = mesh.tp == 1 ? ""
                        : " x tp=" + std::to_string(mesh.tp) +
                              (options.sequence_parallel ? " (sequence parallel)" : "");
  say(out, "pipeline: dp=%d%s x pp=%d, %s, v=%d, recompute %s%s\n", mesh.dp, tp.c_str(), mesh.pp,
      schedule_title(setup).c_str(), placement.v, options.recompute ? "on" : "off", zero);
  for (int vs = 0; vs < placement.virtual_stages(); ++vs)
    say(out, "  stage %d chunk %d: %s\n", placement.stage_of(vs), placement.chunk_of(vs),
        layers_text(setup.virtual_stages[vs]).c_str());
  say(out, "%s\n", planned_peaks_line(plan_run_memory(planned_run(setup))).c_str());
  if (setup.layout.pipedream && setup.start.resumed)
    say(out, "pipedream: resumed after step %d with the pipeline empty: it warms up again, as a run that drained "
        "there\n", setup.start.position.step);
  if (setup.layout.pipedream && (options.val_every > 0 || options.sample_every > 0))
    say(out, "pipedream: the pipeline drains after each step that validates or samples (--val-every, "
        "--sample-every: one flush each), then validates and samples the one weight version there\n");

  CommGroups groups = create_world_groups(mesh);
  // On the watchdog's thread: report, and nothing that touches the communicators.
  const std::function<void(const std::string&)> stuck = [&](const std::string& report) {
    if (on_failure) on_failure(report, {});
    std::fprintf(stderr, "%s\n", report.c_str());
    std::fflush(stderr);
    std::_Exit(1);
  };
  // On this thread, the one that issues every NCCL call: report, then abort.
  const std::function<void(const std::string&)> fail = [&](const std::string& what) {
    if (on_failure) on_failure(rank_failure_line(mesh, what), [&groups] { abort_world_groups(groups); });
  };
  const RunResult result = is_bf16(setup) ? train_with<__nv_bfloat16>(setup, groups, files, fail, stuck, out)
                                          : train_with<float>(setup, groups, files, fail, stuck, out);
  destroy_world_groups(groups);
  return result;
}

RunResult run_training(const TrainOptions& options, std::FILE* out) {
  return run_training(prepare_run(options, out), out);
}
