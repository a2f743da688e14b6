// train_step's two front ends (trainer/step/trainer.h): a step's microbatches read into the
// trainer's pinned host buffers, each at its length, with the step's loss normalisation, then
// run_step. At fixed length every microbatch is at T; with documents each at its own.
#include <stdexcept>
#include <string>

#include "trainer/step/trainer.h"

template <typename Element>
StepResult train_step(Trainer<Element>& trainer, BatchReader& reader, const AdamWSettings& settings,
                      double learning_rate, int t) {
  if (trainer.pipedream) return pipedream_step(trainer, reader, settings, learning_rate, t);
  const Mesh& mesh = trainer.groups.mesh;
  const int m = trainer.microbatches;
  const size_t BT = size_t(trainer.B) * trainer.T;
  const uint64_t step_start = reader.next_microbatch;
  reader.next_microbatch = step_start + uint64_t(mesh.dp_rank) * m;
  for (int k = 0; k < m; ++k)
    read_microbatch(reader, trainer.host_tokens + k * BT, trainer.host_targets + k * BT);
  reader.next_microbatch = step_start + uint64_t(mesh.dp) * m;
  // Each microbatch's mean loss, their sum divided by m dp on the host: today's figures, bitwise.
  trainer.shape.lengths.assign(m, trainer.T);
  trainer.shape.loss_scale = 1.0 / (double(BT) * m * mesh.dp);
  trainer.shape.loss_divisor = double(BT);
  StepResult result = run_step(trainer, settings, learning_rate, t, double(m) * mesh.dp);
  result.real_tokens = result.positions = double(BT) * m * mesh.dp;
  return result;
}

template <typename Element>
StepResult train_step(Trainer<Element>& trainer, DocumentReader& reader, size_t cap, const AdamWSettings& settings,
                      double learning_rate, int t) {
  const Mesh& mesh = trainer.groups.mesh;
  const int m = trainer.microbatches;
  const size_t block = size_t(trainer.B) * trainer.T;
  if (reader.B != size_t(trainer.B) || reader.maxT > size_t(trainer.T))
    throw std::runtime_error("train_step: a document reader of B = " + std::to_string(reader.B) + ", maxT = " +
                             std::to_string(reader.maxT) + " for a trainer of B = " + std::to_string(trainer.B) +
                             ", T = " + std::to_string(trainer.T));
  const uint64_t step_start = reader.next_microbatch;
  // Every rank counts the whole step's real targets and positions, every replica's microbatches,
  // from the document starts alone: the same loss scale on every stage and replica, no exchange.
  double real = 0, positions = 0;
  for (uint64_t k = step_start; k < step_start + uint64_t(mesh.dp) * m; ++k) {
    real += double(microbatch_real_tokens(reader, k, cap));
    positions += double(trainer.B) * double(microbatch_length(reader, k, cap));
  }
  trainer.shape.lengths.resize(m);
  reader.next_microbatch = step_start + uint64_t(mesh.dp_rank) * m;
  for (int k = 0; k < m; ++k)
    trainer.shape.lengths[k] =
        int(read_document_microbatch(reader, cap, trainer.host_tokens + k * block, trainer.host_targets + k * block));
  reader.next_microbatch = step_start + uint64_t(mesh.dp) * m;
  // The microbatches' plain loss sums, added over the world, then divided once by the real targets:
  // their mean, whatever the split of the step into microbatches (a mean per microbatch would
  // weigh a short one as a long one). Like the means at fixed length, the sums add exactly for
  // losses of a few units (pipeline_harness.h's argument), so replicas do not change the bits.
  trainer.shape.loss_scale = 1.0 / real;
  trainer.shape.loss_divisor = 1.0;
  StepResult result = run_step(trainer, settings, learning_rate, t, real);
  result.real_tokens = real;
  result.positions = positions;
  return result;
}

#define INSTANTIATE_TRAIN_STEP(Element)                                                                            \
  template StepResult train_step<Element>(Trainer<Element>&, BatchReader&, const AdamWSettings&, double, int);   \
  template StepResult train_step<Element>(Trainer<Element>&, DocumentReader&, size_t, const AdamWSettings&, double, \
                                          int);

INSTANTIATE_TRAIN_STEP(float)
INSTANTIATE_TRAIN_STEP(__nv_bfloat16)
