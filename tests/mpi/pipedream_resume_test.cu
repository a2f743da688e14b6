// A checkpoint of PipeDream's asynchronous pipeline (docs/pipeline.md, "Checkpoints"): ./train's
// whole run (run_training) saves at its last step, where the pipeline has drained, and a resume
// warms it up again. On every rank of the world, one stage each (p = mpirun's -np), the run saved
// after step 2 and resumed to step 4 is bitwise the one-process reference (tests/pipedream_
// reference.h) draining after step 2: each step's loss and the model file saved at the end. The
// same run of 4 steps without a save never drains: its first 2 losses are the saved run's and the
// next 2 are not (microbatches after the drain take fresher versions); --save-every drains at
// each save, as the reference draining there; --val-every and --sample-every drain where they
// validate and sample, and the validation loss there is the reference's model at that drain
// evaluated. Kept in the PipelineLayouts suite, which tools/run_tests.sh runs at -np 2, 4 and 8.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "model/checkpoint_format.h"
#include "tests/file_tools.h"
#include "tests/mpi/pipeline_harness.h"
#include "tests/mpi/shared_directory.h"
#include "tests/pipedream_reference.h"
#include "trainer/program/run.h"

namespace {

using namespace pipeline_harness;

constexpr int kDrainStep = 2, kSteps = 4, kM = 4;

// One stage a rank, 8 layers (a whole number per stage up to p = 8), a constant learning rate
// (the reference's) and full fp32 GEMMs (the reference's handle has no TF32).
TrainOptions pipedream_options(const std::string& dir) {
  TrainOptions options;
  options.train_data = dir + "text.txt";
  options.layers = 8;
  options.heads = 2;
  options.dim = 16;
  options.seq_len = kT;
  options.batch = kB;
  options.pp = size_of_world();
  options.schedule = "pipedream";
  options.microbatches = kM;
  options.grad_clip = 0;  // pipedream does not clip without vertical sync
  options.lr_schedule = "constant";
  options.warmup = 0;
  options.no_tf32 = true;
  options.val_every = 0;
  options.sample_every = 0;
  options.steps = kSteps;
  return options;
}

std::vector<double> losses(const RunResult& result) {
  std::vector<double> all;
  for (const StepRecord& step : result.steps) all.push_back(step.loss);
  return all;
}

// The synchronous evaluation of a model (llm.c's layout, fp32) on the first `batches` microbatches
// of reader: the whole model's forward in one process, each batch's mean loss, their mean.
double reference_validation_loss(const GPTConfig& config, int B, int T, const std::vector<float>& parameters,
                                 BatchReader reader, int batches) {
  const LayerRange whole = whole_model(config);
  DeviceBuffer<float> params(parameters);
  DeviceBuffer<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  std::vector<int> host_tokens(size_t(B) * T), host_targets(size_t(B) * T);
  Activations<float> acts = create_activations<float>(config, B, T, whole);
  CublasHandle cublas;
  double sum = 0;
  for (int batch = 0; batch < batches; ++batch) {
    read_microbatch(reader, host_tokens.data(), host_targets.data());
    tokens.upload(host_tokens);
    targets.upload(host_targets);
    gpt_forward(config, whole, point_views(params.data(), config), acts, tokens.data(), nullptr, targets.data(), 1.0,
                B, T, cublas.get(), nullptr);
    sum += mean_loss(acts, B, T, nullptr);
  }
  destroy_activations(acts);
  return sum / batches;
}

TEST(PipelineLayouts, PipeDreamResumedAfterASaveIsTheReferenceDrainingThere) {
  SharedDirectory dir;
  const TrainOptions straight = pipedream_options(dir.path);
  TrainOptions first = straight;
  first.steps = kDrainStep;
  first.save = dir.path + "first.bin";
  TrainOptions second = straight;
  second.resume = first.save;
  second.save = dir.path + "second.bin";

  const std::vector<double> uninterrupted = losses(run_training(straight, nullptr));
  const std::vector<double> saved = losses(run_training(first, nullptr));
  const std::vector<double> resumed = losses(run_training(second, nullptr));

  const RunSetup setup = prepare_run(straight);
  const PipeDreamRule rule{};  // ./train's defaults: an update a backward, stashing
  const AdamWSettings settings{straight.beta1, straight.beta2, straight.eps, straight.weight_decay, 0.0};
  const pipedream_reference::Run expected = pipedream_reference::run(
      setup.start.config, setup.B, setup.T, size_of_world(), kM, kSteps, rule, settings, straight.lr,
      setup.start.parameters, make_batch_reader(setup.data.train, setup.B, setup.T, straight.shuffle, straight.seed),
      1, {kDrainStep});
  ASSERT_EQ(expected.losses.size(), size_t(kSteps));
  EXPECT_EQ(saved, std::vector<double>(expected.losses.begin(), expected.losses.begin() + kDrainStep));
  EXPECT_EQ(resumed, std::vector<double>(expected.losses.begin() + kDrainStep, expected.losses.end()));
  EXPECT_TRUE(read_model_file(second.save).parameters == expected.parameters)
      << "the model saved after the resumed run differs from the reference's after its last update";

  // The run that does not save does not drain: the same until the drain, another run after it.
  ASSERT_EQ(uninterrupted.size(), size_t(kSteps));
  EXPECT_EQ(std::vector<double>(uninterrupted.begin(), uninterrupted.begin() + kDrainStep), saved);
  for (int t = kDrainStep; t < kSteps; ++t)
    EXPECT_NE(uninterrupted[t], resumed[t - kDrainStep]) << "step " << t + 1 << " is the same without the drain";
}

// --save-every 2 over 6 steps drains after steps 2 and 4 (each part a run of its own, warming up
// again) and saves there: each step's loss and the model saved at the end are the reference's
// draining at the same steps, with stashing and with vertical sync, every update clipped (the
// updates after a part's last forward are decided at the part's end, pipeline/pipedream_run.h).
// A run of 3 steps saving every 2 (a save mid-run at step 2, and at its end), resumed to step 6
// with the same --save-every (a drain after step 4 of the whole run, its second step), is the
// reference draining after steps 2, 3 and 4.
TEST(PipelineLayouts, PipeDreamSaveEveryIsTheReferenceDrainingAtEachSave) {
  SharedDirectory dir;
  for (const bool vertical_sync : {false, true}) {
    SCOPED_TRACE(vertical_sync ? "vertical sync" : "stashing");
    TrainOptions whole = pipedream_options(dir.path);
    whole.steps = 6;
    whole.save_every = 2;
    whole.save = dir.path + "whole.bin";
    whole.vertical_sync = vertical_sync;
    whole.grad_clip = vertical_sync ? 0.05f : 0.0f;  // below every update's norm of the tiny model
    TrainOptions first = whole, second = whole;
    first.steps = 3;
    first.save = dir.path + "first.bin";
    second.resume = first.save;
    second.save = dir.path + "second.bin";
    const std::vector<double> drained = losses(run_training(whole, nullptr));
    std::vector<double> resumed = losses(run_training(first, nullptr));
    for (double loss : losses(run_training(second, nullptr))) resumed.push_back(loss);

    const RunSetup setup = prepare_run(whole);
    const auto reference = [&](const std::vector<int>& drains) {
      const AdamWSettings settings{whole.beta1, whole.beta2, whole.eps, whole.weight_decay, whole.grad_clip};
      return pipedream_reference::run(setup.start.config, setup.B, setup.T, size_of_world(), kM, whole.steps,
                                      PipeDreamRule{1, true, vertical_sync}, settings, whole.lr,
                                      setup.start.parameters,
                                      make_batch_reader(setup.data.train, setup.B, setup.T, whole.shuffle, whole.seed),
                                      1, drains);
    };
    const pipedream_reference::Run expected = reference({2, 4}), expected_resumed = reference({2, 3, 4});
    EXPECT_EQ(drained, expected.losses);
    EXPECT_TRUE(read_model_file(whole.save).parameters == expected.parameters)
        << "the model saved at the end differs from the reference's draining after steps 2 and 4";
    EXPECT_EQ(resumed, expected_resumed.losses);
    EXPECT_TRUE(read_model_file(second.save).parameters == expected_resumed.parameters)
        << "the resumed run's model differs from the reference's draining after steps 2, 3 and 4";
  }
}

// The checkpoint is the synchronous schedules' (the same model and state files), and a run that
// resumes one continues it whichever schedule wrote it. On one stage with an update a step
// (--update-every m), pipedream computes 1F1B's sums (TrainLayout.PipeDreamOnOneStage...), here
// with the world's ranks as replicas: saved after step 2 by either schedule and resumed by the
// other to step 4, the last 2 losses and the model saved at the end are 1F1B's uninterrupted run's,
// bitwise (AdamW's count after a resume is the synchronous one: an update a step).
TEST(PipelineLayouts, PipeDreamAndSynchronousCheckpointsResumeEachOther) {
  SharedDirectory dir;
  TrainOptions sync = pipedream_options(dir.path);
  sync.schedule = "1f1b";
  sync.pp = 1;
  sync.dp = size_of_world();
  sync.save = dir.path + "sync.bin";
  TrainOptions async = sync;
  async.schedule = "pipedream";
  async.update_every = kM;
  const std::vector<double> uninterrupted = losses(run_training(sync, nullptr));
  for (const auto& [writer, reader] : {std::pair{async, sync}, std::pair{sync, async}}) {
    SCOPED_TRACE("saved by " + writer.schedule + ", resumed by " + reader.schedule);
    TrainOptions first = writer, second = reader;
    first.steps = kDrainStep;
    first.save = dir.path + "first.bin";
    second.resume = first.save;
    second.save = dir.path + "second.bin";
    run_training(first, nullptr);
    const std::vector<double> resumed = losses(run_training(second, nullptr));
    EXPECT_EQ(resumed, std::vector<double>(uninterrupted.begin() + kDrainStep, uninterrupted.end()));
    EXPECT_TRUE(read_bytes(second.save) == read_bytes(sync.save)) << "the model files at the end differ";
    EXPECT_TRUE(read_bytes(training_state_path(second.save)) == read_bytes(training_state_path(sync.save)))
        << "the state files at the end differ";
  }
}

// --val-every 2 and --sample-every 3 over 4 steps drain after steps 2 and 3 (as --save-every
// would) and validate and sample there, with one weight version and nothing in flight: the
// losses are the reference's draining after steps 2 and 3, steps 2 and 4 carry a validation loss
// and steps 1 and 3 none, and each is the synchronous evaluation on the validation batches of the
// reference's model at that step (its 2-step run's, its whole run's); one sample, after step 3.
TEST(PipelineLayouts, PipeDreamValidatesTheReferenceModelAtEachDrain) {
  SharedDirectory dir;
  TrainOptions options = pipedream_options(dir.path);
  options.val_every = 2;
  options.val_batches = 2;
  options.sample_every = 3;
  options.sample_len = 4;
  // Undrained, the forward-only pass of a validation or sample hangs on the microbatches in flight
  // (watched): the drains are checked first, so that such a fault fails at once.
  const RunSetup setup = prepare_run(options);
  ASSERT_EQ(setup.layout.pipedream->drains, (std::vector<int>{2, 3})) << "the steps that validate or sample";
  const RunResult result = run_training(options, nullptr);

  const auto reference = [&](int steps, const std::vector<int>& drains) {
    const AdamWSettings settings{options.beta1, options.beta2, options.eps, options.weight_decay, 0.0};
    return pipedream_reference::run(setup.start.config, setup.B, setup.T, size_of_world(), kM, steps, PipeDreamRule{},
                                    settings, options.lr, setup.start.parameters,
                                    make_batch_reader(setup.data.train, setup.B, setup.T, options.shuffle, options.seed),
                                    1, drains);
  };
  const pipedream_reference::Run whole = reference(kSteps, {2, 3}), at_step_2 = reference(2, {});
  const auto evaluated = [&](const std::vector<float>& parameters) {
    return reference_validation_loss(setup.start.config, setup.B, setup.T, parameters,
                                     make_batch_reader(setup.data.val, setup.B, setup.T, false, options.seed),
                                     options.val_batches);
  };
  EXPECT_EQ(losses(result), whole.losses);
  ASSERT_EQ(result.steps.size(), size_t(kSteps));
  for (const StepRecord& step : result.steps) EXPECT_EQ(step.has_val_loss, step.step % 2 == 0) << "step " << step.step;
  EXPECT_EQ(result.steps[1].val_loss, evaluated(at_step_2.parameters)) << "step 2's validation";
  EXPECT_EQ(result.steps[3].val_loss, evaluated(whole.parameters)) << "step 4's validation";
  EXPECT_EQ(result.samples.size(), 1u);
}

}  // namespace
