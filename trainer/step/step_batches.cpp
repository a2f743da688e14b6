// train_step's front ends (trainer/step/trainer.h): a step's microbatches read into the
// trainer's pinned host buffers, each at its length, with the step's loss normalisation, then
// run_step. Packed, every microbatch is at T, or at the warm-up's cap; with documents each at its own.
#include <cstring>
#include <stdexcept>
#include <string>

#include "trainer/step/trainer.h"

namespace {

// With pipedream the warm-up's caps come from trainer.warmup (the steps read ahead need theirs):
// the caller's cap must be that of step t.
template <typename Element>
void check_pipedream_cap(const Trainer<Element>& trainer, size_t cap, int t) {
  if (cap != pipedream_cap(trainer, uint64_t(t - 1)))
    throw std::logic_error("train_step: pipedream's step " + std::to_string(t) + " at cap " + std::to_string(cap) +
                           ", its warm-up's is " + std::to_string(pipedream_cap(trainer, uint64_t(t - 1))) +
                           " (set trainer.warmup)");
}

}  // namespace

void cut_rows_to(size_t cap, size_t B, size_t T, int* tokens, int* targets) {
  // A row's destination never lies past its source, so moving them in row order is safe.
  for (size_t b = 1; cap < T && b < B; ++b) {
    std::memmove(tokens + b * cap, tokens + b * T, cap * sizeof(int));
    std::memmove(targets + b * cap, targets + b * T, cap * sizeof(int));
  }
}

template <typename Element>
StepResult train_step(Trainer<Element>& trainer, BatchReader& reader, const AdamWSettings& settings,
                      double learning_rate, int t) {
  return train_step(trainer, reader, size_t(trainer.T), settings, learning_rate, t);
}

template <typename Element>
StepResult train_step(Trainer<Element>& trainer, BatchReader& reader, size_t cap, const AdamWSettings& settings,
                      double learning_rate, int t) {
  if (trainer.pipedream) {
    check_pipedream_cap(trainer, cap, t);
    return pipedream_step(trainer, reader, settings, learning_rate, t);
  }
  const Mesh& mesh = trainer.groups.mesh;
  const int m = trainer.microbatches;
  const size_t B = size_t(trainer.B), T = size_t(trainer.T), BT = B * T, rows = B * cap;
  if (cap == 0 || cap > T)
    throw std::runtime_error("train_step: sequence length " + std::to_string(cap) + " is not in [1, T = " +
                             std::to_string(T) + "]");
  const uint64_t step_start = reader.next_microbatch;
  reader.next_microbatch = step_start + uint64_t(mesh.dp_rank) * m;
  for (int k = 0; k < m; ++k) {
    int* tokens = trainer.host_tokens + k * BT;
    int* targets = trainer.host_targets + k * BT;
    read_microbatch(reader, tokens, targets);
    cut_rows_to(cap, B, T, tokens, targets);  // below T (the warm-up): each row's first cap tokens
  }
  reader.next_microbatch = step_start + uint64_t(mesh.dp) * m;
  // Each microbatch's mean loss, their sum divided by m dp on the host: at cap = T today's
  // figures, bitwise.
  trainer.shape.lengths.assign(m, int(cap));
  trainer.shape.loss_scale = 1.0 / (double(rows) * m * mesh.dp);
  trainer.shape.loss_divisor = double(rows);
  StepResult result = run_step(trainer, settings, learning_rate, t, double(m) * mesh.dp);
  result.real_tokens = result.positions = double(rows) * m * mesh.dp;
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
  if (trainer.pipedream) {
    check_pipedream_cap(trainer, cap, t);
    return pipedream_step(trainer, reader, settings, learning_rate, t);
  }
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
  template StepResult train_step<Element>(Trainer<Element>&, BatchReader&, size_t, const AdamWSettings&, double,  \
                                          int);                                                                  \
  template StepResult train_step<Element>(Trainer<Element>&, DocumentReader&, size_t, const AdamWSettings&, double, \
                                          int);

INSTANTIATE_TRAIN_STEP(float)
INSTANTIATE_TRAIN_STEP(__nv_bfloat16)
