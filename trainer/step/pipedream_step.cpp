// --schedule pipedream's step (trainer/step/trainer.h's pipedream_step): the step's microbatches and
// those stage 0 reads ahead, the executor's part of the run with its updates, the step's loss; and
// the trainer's set-up for it.
#include <algorithm>
#include <csignal>
#include <string>
#include <type_traits>
#include <vector>

#include "comm/host_exchange.h"
#include "kernels/cuda_check.cuh"
#include "pipeline/pipedream_walk.h"
#include "trainer/safety/preemption.h"
#include "trainer/step/trainer.h"

template <typename Element>
void enable_pipedream_updates(Trainer<Element>& trainer, const PipeDreamLayout& layout) {
  trainer.pipedream = std::make_shared<TrainerPipeDreamUpdates<Element>>(
      trainer.config, layout.rule, trainer.groups.mesh.pp, trainer.microbatches, trainer.parameter_layout,
      trainer.groups, trainer.optimizer, trainer.parameter_memory, trainer.gradient_memory, trainer.grad_wte_head);
  enable_pipedream(trainer.executor, layout.rule, trainer.microbatches, layout.steps, trainer.parameter_layout,
                   trainer.parameter_memory, trainer.gradient_memory, std::shared_ptr<PipeDreamUpdates<Element>>(trainer.pipedream),
                   layout.drains);
  trainer.pipedream_sums.resize(3 + size_t(trainer.groups.mesh.pp));
  const int read = trainer.microbatches + trainer.groups.mesh.pp - 1, K = layout.rule.update_every;
  trainer.pipedream_update_real.resize(size_t((read + K - 1) / K));
}

namespace {

// Microbatch `index` of the data at cap into tokens and targets ((B, T_k) at their start); its T_k.
// Packed: each row's first cap tokens, rows packed to (B, cap) as the synchronous step packs them.
size_t read_at(BatchReader& reader, uint64_t index, size_t cap, int* tokens, int* targets) {
  reader.next_microbatch = index;
  read_microbatch(reader, tokens, targets);
  cut_rows_to(cap, reader.B, reader.T, tokens, targets);
  return cap;
}
size_t read_at(DocumentReader& reader, uint64_t index, size_t cap, int* tokens, int* targets) {
  reader.next_microbatch = index;
  return read_document_microbatch(reader, cap, tokens, targets);
}
double real_targets(BatchReader& reader, uint64_t, size_t cap) { return double(reader.B * cap); }
double real_targets(DocumentReader& reader, uint64_t index, size_t cap) {
  return double(microbatch_real_tokens(reader, index, cap));
}
double positions_of(BatchReader& reader, uint64_t, size_t cap) { return double(reader.B * cap); }
double positions_of(DocumentReader& reader, uint64_t index, size_t cap) {
  return double(reader.B) * double(microbatch_length(reader, index, cap));
}

}  // namespace

template <typename Element>
size_t pipedream_cap(const Trainer<Element>& trainer, uint64_t step) {
  return trainer.warmup.max == 0 ? size_t(trainer.T) : warmup_seq_len(trainer.warmup, step);
}

template <typename Element, typename Reader>
StepResult pipedream_step(Trainer<Element>& trainer, Reader& reader, const AdamWSettings& settings,
                          double learning_rate, int t) {
  constexpr bool padded = std::is_same_v<Reader, DocumentReader>;
  const Mesh& mesh = trainer.groups.mesh;
  const int m = trainer.microbatches, ahead = mesh.pp - 1, dp = mesh.dp, K = trainer.pipedream->update_every();
  const size_t BT = size_t(trainer.B) * trainer.T;
  const uint64_t step_start = reader.next_microbatch;
  // The synchronous schedules' split: a step reads m dp microbatches, replica r its r m .. r m + m - 1;
  // the ones read ahead are the replica's own of the following step(s), each at its own step's cap.
  const auto index_of = [&](int k, int replica) {
    return step_start + uint64_t(k / m) * m * dp + uint64_t(replica) * m + k % m;
  };
  const auto cap_of = [&](int k) { return pipedream_cap(trainer, uint64_t(t - 1 + k / m)); };
  // Every rank counts each update's real targets, its K microbatches of every replica, from the
  // data alone: the same loss scale on every stage and replica, no exchange. An update's gradient,
  // summed over the replicas, is then that of the mean loss over its real targets. The updates of
  // the microbatches read ahead are counted again by the next step: B look-ups a microbatch, the
  // whole count about 2 us of a 1.7 s step at p = 4 (--documents, 2026-11-28, this machine's CPU
  // build), too little to keep the counts from one step to the next.
  std::vector<double>& update_real = trainer.pipedream_update_real;
  const int updates = int(update_real.size()), own = m / K;
  for (int u = 0; u < updates; ++u) {
    update_real[size_t(u)] = 0;
    for (int k = u * K; k < u * K + K; ++k)
      for (int r = 0; r < dp; ++r) update_real[size_t(u)] += real_targets(reader, index_of(k, r), cap_of(k));
  }
  trainer.shape.lengths.resize(size_t(m + ahead));
  trainer.shape.loss_scales.resize(size_t(m + ahead));
  for (int k = 0; k < m + ahead; ++k) trainer.shape.loss_scales[size_t(k)] = 1.0 / update_real[size_t(k / K)];
  double step_real = 0, step_positions = 0;
  for (int u = 0; u < own; ++u) step_real += update_real[size_t(u)];
  for (int k = 0; k < m; ++k)
    for (int r = 0; r < dp; ++r) step_positions += positions_of(reader, index_of(k, r), cap_of(k));
  for (int k = 0; k < m + ahead; ++k)
    trainer.shape.lengths[size_t(k)] = int(read_at(reader, index_of(k, mesh.dp_rank), cap_of(k),
                                                   trainer.host_tokens + k * BT, trainer.host_targets + k * BT));
  reader.next_microbatch = step_start + uint64_t(m) * dp;
  // Packed, each microbatch's mean loss (their sum over m dp, the step's loss); with documents the
  // plain loss sums, over the step's real targets (train_step's).
  trainer.shape.loss_divisor = padded ? 1.0 : double(trainer.B) * double(cap_of(0));
  trainer.pipedream->set_step(settings, t, learning_rate);
  execute_step(trainer.executor, trainer.params, trainer.grads, trainer.grad_wte_head, trainer.host_tokens,
               trainer.host_targets, trainer.shape);
  StepFigures& figures = *trainer.figures;
  CUDA_CHECK(cudaMemcpyAsync(&figures.loss_sum, trainer.executor.loss_sum, sizeof(double), cudaMemcpyDeviceToHost,
                             trainer.stream));
  const std::vector<int> decided = trainer.pipedream->queue_decisions_download(trainer.stream);
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));  // the step's one host wait
  finish_step(trainer.executor);
  // Only the head stages' loss sums are not 0 (one a replica): their forwards of the step's own
  // microbatches (the last stage runs each microbatch's forward and backward in the same step).
  // Also counts the stop signals, and without vertical sync carries per stage the first update
  // its own gate skipped in the step (replica 0's rank speaks for its stage: the replicas gate the
  // same sum alike).
  const int stop_signal = received_stop_signal();
  const bool vertical_sync = trainer.pipedream->vertical_sync();
  std::vector<double>& sums = trainer.pipedream_sums;
  std::fill(sums.begin(), sums.end(), 0.0);
  sums[0] = figures.loss_sum;
  sums[1] = stop_signal == SIGTERM ? 1.0 : 0.0;
  sums[2] = stop_signal == SIGINT ? 1.0 : 0.0;
  for (int v : decided)
    if (!vertical_sync && mesh.dp_rank == 0 && mesh.tp_rank == 0 && !trainer.pipedream->applied(v) &&
        sums[3 + size_t(mesh.pp_rank)] == 0)
      sums[3 + size_t(mesh.pp_rank)] = v;
  sum_over_world(trainer.world, sums.data(), sums.size());
  StepResult result;
  result.loss = sums[0] / (padded ? step_real : double(m) * dp);
  // The updates decided in the step (with vertical sync): those whose last microbatch it ran, but
  // the cool-down's, decided at the end of the last step (pipeline/pipedream_run.h).
  result.has_norm = vertical_sync && !decided.empty();
  result.grad_norm = result.has_norm ? trainer.pipedream->norm(decided.back()) : 0;
  for (int v : decided)
    if (vertical_sync && result.applied && !trainer.pipedream->applied(v)) {
      result.applied = false;
      result.skipped = "non-finite gradient norm of update " + std::to_string(v) + ", not applied on any stage";
    }
  // Without vertical sync the stages above a stage applied update v before it had its gradient of
  // v, so a skip cannot be agreed: the run stops here, every rank alike (docs/pipeline.md). One
  // stage alone skipped it consistently: the step is skipped, as the synchronous guard's.
  int first_stage = -1;
  for (int s = 0; s < mesh.pp; ++s)
    if (sums[3 + size_t(s)] > 0 && (first_stage < 0 || sums[3 + size_t(s)] < sums[3 + size_t(first_stage)]))
      first_stage = s;
  if (first_stage >= 0) {
    const std::string update = std::to_string(int(sums[3 + size_t(first_stage)]));
    const std::string stage = std::to_string(first_stage);
    result.applied = false;
    result.skipped = "non-finite gradient of update " + update + " on stage " + stage + ", not applied there";
    if (mesh.pp > 1)
      result.stop = "pipedream: update " + update + "'s gradient is not finite on stage " + stage +
                    ", which did not apply it, but without --vertical-sync the other stages may have (the later "
                    "ones apply an update before stage " + stage + " has its gradient): the stages no longer hold "
                    "one model, so the run stops without saving; rerun with --vertical-sync, which skips such an "
                    "update on every stage";
  }
  result.stop_signal = sums[2] > 0 ? SIGINT : sums[1] > 0 ? SIGTERM : 0;
  result.real_tokens = step_real;
  result.positions = step_positions;
  result.stages = gather_stage_records(trainer.world, trainer.groups.mesh,
                                       measure_stage(trainer.groups.mesh.pp_rank, trainer.executor.accounting));
  return result;
}

template void enable_pipedream_updates<float>(Trainer<float>&, const PipeDreamLayout&);
template void enable_pipedream_updates<__nv_bfloat16>(Trainer<__nv_bfloat16>&, const PipeDreamLayout&);
#define INSTANTIATE_PIPEDREAM_STEP(Element, Reader)                                                                 \
  template StepResult pipedream_step<Element, Reader>(Trainer<Element>&, Reader&, const AdamWSettings&, double, int);
INSTANTIATE_PIPEDREAM_STEP(float, BatchReader)
INSTANTIATE_PIPEDREAM_STEP(float, DocumentReader)
INSTANTIATE_PIPEDREAM_STEP(__nv_bfloat16, BatchReader)
INSTANTIATE_PIPEDREAM_STEP(__nv_bfloat16, DocumentReader)
template size_t pipedream_cap<float>(const Trainer<float>&, uint64_t);
template size_t pipedream_cap<__nv_bfloat16>(const Trainer<__nv_bfloat16>&, uint64_t);
