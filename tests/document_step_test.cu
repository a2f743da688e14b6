// The trainer's step over document-aligned microbatches (issue 34, train_step with a
// DocumentReader): its loss and gradient are the mean over the step's real tokens, so the same
// sequences split into other microbatches (other T, other padding) give the same step; the
// executor refuses lengths outside [1, maxT] that a front end might hand it. One process,
// a tiny model (L=2, NH=2, C=16, maxT=8, V=128) on a text of short chapters.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "tests/random_chapters.h"
#include "tests/scaled_error.h"
#include "trainer/data/documents.h"
#include "trainer/step/trainer.h"

namespace {

constexpr int kMaxT = 8;

// 200 chapters (tests/random_chapters.h): pairs of sequences at maxT 8 differ in length.
TokenDataset chapters() { return random_chapters(200, "chapters"); }

struct StepOutcome {
  StepResult result;
  std::vector<float> gradients;
};

// Step 1 over the first B m sequences of data, as m microbatches of B.
StepOutcome first_step(const TokenDataset& data, int B, int m) {
  const GPTConfig config = make_gpt_config(2, 2, 16, kMaxT, 128);
  Trainer<float> trainer = create_trainer<float>(config, B, kMaxT, m);
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, 1234);
  upload_parameters(trainer, parameters);
  DocumentReader reader = make_document_reader(data, B, kMaxT, false, 1);
  StepOutcome outcome;
  outcome.result = train_step(trainer, reader, kMaxT, AdamWSettings{0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-3, 1);
  outcome.gradients = download_gradients(trainer);
  destroy_trainer(trainer);
  return outcome;
}

}  // namespace

// Sequences 0..3 as one microbatch of B = 4 (T 8, 3 padded positions) and as two of B = 2 (T 7 and
// 8, 1 padded): the loss and every gradient are the mean over the same 29 real tokens. A divisor
// of the positions instead (32 against 30) would be off by 6%. fp32 within: the two splits sum
// the same products in other orders (a few roundings of 6e-8 relative; measured: the loss
// bitwise, the norm 4.7e-8 relative, the gradients 1.2e-7 of their scale), bound 1e-6.
TEST(DocumentStep, LossAndGradientAreTheMeanOverRealTokensWhateverTheMicrobatches) {
  const TokenDataset data = chapters();
  const StepOutcome one = first_step(data, 4, 1), two = first_step(data, 2, 2);
  ASSERT_EQ(one.result.real_tokens, two.result.real_tokens) << "the same sequences";
  ASSERT_NE(one.result.positions, two.result.positions) << "the splits should pad differently";
  ASSERT_LT(one.result.real_tokens, one.result.positions) << "the step should hold padding";
  EXPECT_NEAR(one.result.loss, two.result.loss, 1e-6 * std::fabs(one.result.loss));
  EXPECT_NEAR(one.result.grad_norm, two.result.grad_norm, 1e-6 * one.result.grad_norm);
  EXPECT_LE(max_error_relative_to_scale({one.gradients.begin(), one.gradients.end()},
                                        {two.gradients.begin(), two.gradients.end()}),
            1e-6);
}

// A cap above the trainer's maxT is refused in one line before anything runs.
TEST(DocumentStep, CapAboveMaxTIsAnError) {
  const TokenDataset data = chapters();
  const GPTConfig config = make_gpt_config(2, 2, 16, kMaxT, 128);
  Trainer<float> trainer = create_trainer<float>(config, 2, kMaxT, 1);
  DocumentReader reader = make_document_reader(data, 2, kMaxT, false, 1);
  try {
    train_step(trainer, reader, kMaxT + 1, AdamWSettings{0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-3, 1);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error& error) {
    EXPECT_STREQ(error.what(), "chapters: microbatch length 9 is not in [1, maxT = 8]");
  }
  destroy_trainer(trainer);
}

// The executor's own check (issue 34 item 6): lengths handed to the step past what the reader
// guards (a front end's bug), one above maxT, one of 0, or fewer lengths than microbatches, are
// each refused in one line before any kernel runs, instead of overrunning the buffers sized for maxT.
TEST(DocumentStep, ExecutorRefusesALengthOutsideOneToMaxT) {
  const GPTConfig config = make_gpt_config(2, 2, 16, kMaxT, 128);
  Trainer<float> trainer = create_trainer<float>(config, 2, kMaxT, 2);
  const auto error_of = [&](std::vector<int> lengths) -> std::string {
    trainer.shape.lengths = lengths;
    trainer.shape.loss_scale = 1.0 / 16;
    trainer.shape.loss_divisor = 1.0;
    try {
      run_step(trainer, AdamWSettings{0.9, 0.95, 1e-8, 0.1, 1.0}, 1e-3, 1, 16.0);
    } catch (const std::runtime_error& error) {
      return error.what();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_of({8, kMaxT + 1}), "execute_step: microbatch 1 has T = 9, not in [1, maxT = 8]");
  EXPECT_EQ(error_of({0, 8}), "execute_step: microbatch 0 has T = 0, not in [1, maxT = 8]");
  EXPECT_EQ(error_of({8}), "execute_step: 1 microbatch lengths for a schedule of 2 microbatches");
  destroy_trainer(trainer);
}
