// The trainer's side of PipeDream's asynchronous pipeline (trainer/step/pipedream_updates.h).
#include "trainer/step/pipedream_updates.h"

#include <stdexcept>
#include <string>

#include "comm/collectives.h"
#include "comm/nccl_types.h"
#include "kernels/adamw.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/stochastic_rounding.cuh"
#include "model/gpt.cuh"
#include "trainer/safety/failure_injection.h"

template <typename Element>
TrainerPipeDreamUpdates<Element>::TrainerPipeDreamUpdates(const GPTConfig& config, const PipeDreamRule& rule, int p,
                                                          int m, const ParameterLayout& layout,
                                                          const CommGroups& groups, const Optimizer& optimizer,
                                                          Element* parameters, Element* gradients,
                                                          Element* grad_wte_head)
    : config_(config), rule_(rule), m_(m), layout_(layout), groups_(groups), optimizer_(optimizer),
      parameters_(parameters), gradients_(gradients), embedding_(false), head_(false), owns_ring_(false) {
  for (const ParameterRegion& r : layout.regions)
    if (r.tensor == kWte) wte_offset_ = r.offset;
  for (const LayerRange& range : layout.chunks) {
    embedding_ = embedding_ || range.has_embedding;
    head_ = head_ || range.has_head;
  }
  // The gradients add up from here to each update, which zeroes them (a synchronous step zeroes
  // them at its start instead).
  CUDA_CHECK(cudaMemset(gradients, 0, layout.size * sizeof(Element)));
  const size_t wte_count = size_t(config.padded_vocab_size) * config.channels;
  if (head_ && embedding_) {  // one stage: each update's share is summed at once
    ring_ = {grad_wte_head};
    CUDA_CHECK(cudaMemset(grad_wte_head, 0, wte_count * sizeof(Element)));
  }
  if (head_ && !embedding_) {
    owns_ring_ = true;
    for (int i = 0; i < pipedream_head_ring_size(rule, p); ++i) {
      ring_.push_back(device_alloc<Element>(wte_count));
      CUDA_CHECK(cudaMemset(ring_.back(), 0, wte_count * sizeof(Element)));
    }
  }
  // AdamW's two launches: the tied copy (updated apart, bring_tied_embedding_to) is first in the
  // layout (model/parameter_layout.cpp), so the other regions are one range after it.
  tied_count_ = tied_copy_count(layout);
  std::vector<ParameterRegion> others, tied;
  for (const ParameterRegion& r : layout.regions) (r.tied_copy ? tied : others).push_back(r);
  for (const ParameterRegion& r : tied)
    if (r.offset != 0) throw std::logic_error("pipedream: the tied copy of wte is not first in the stage's layout");
  adamw_tables_ = upload_adamw_tables({{others, tied_count_, others.size(), layout.size - tied_count_},
                                       {tied, 0, tied.size(), tied_count_}});
  // Every update applied unclipped until a norm (with vertical sync) or the stage's own check
  // (without) decides otherwise.
  const int kept = pipedream_decisions_kept(rule, p, m);
  host_gates_.assign(size_t(kept), AdamWGate{1.0, 1});
  host_norms_.assign(size_t(kept), 0.0);
  gates_ = device_alloc<AdamWGate>(size_t(kept));
  norms_ = device_alloc<double>(size_t(kept));
  CUDA_CHECK(cudaMemcpy(gates_, host_gates_.data(), kept * sizeof(AdamWGate), cudaMemcpyHostToDevice));
  CUDA_CHECK(cudaMemset(norms_, 0, kept * sizeof(double)));
  // The guard here counts the norm alone (no loss is summed per update): no rank flags a loss.
  CUDA_CHECK(cudaMemset(optimizer_.nonfinite_ranks, 0, sizeof(double)));
  if (!rule.vertical_sync) {
    own_sum_ = device_alloc<float>(1);
    own_workspace_ = device_alloc<float>(global_norm_workspace_size(1));
    own_nonfinite_ = device_alloc<double>(1);
    tied_gate_ = device_alloc<AdamWGate>(1);
    tied_norm_ = device_alloc<double>(1);
    CUDA_CHECK(cudaMemset(own_nonfinite_, 0, sizeof(double)));
  }
}

template <typename Element>
TrainerPipeDreamUpdates<Element>::~TrainerPipeDreamUpdates() {
  if (owns_ring_)
    for (Element* share : ring_) device_free(share);
  free_adamw_tables(adamw_tables_);
  device_free(gates_);
  device_free(norms_);
  device_free(own_sum_);  // each nullptr with vertical sync: device_free does nothing
  device_free(own_workspace_);
  device_free(own_nonfinite_);
  device_free(tied_gate_);
  device_free(tied_norm_);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::set_step(const AdamWSettings& settings, int t, double learning_rate) {
  if (first_step_ == 0) first_step_ = t;
  if (t != first_step_ + int(learning_rates_.size()))
    throw std::logic_error("pipedream: step " + std::to_string(t) + " after step " +
                           std::to_string(first_step_ + int(learning_rates_.size()) - 1));
  settings_ = settings;
  learning_rates_.push_back(learning_rate);
}

template <typename Element>
Element* TrainerPipeDreamUpdates<Element>::share_of_update(int version) {
  return ring_[size_t(version) % ring_.size()];
}

template <typename Element>
Element* TrainerPipeDreamUpdates<Element>::head_share(int microbatch) {
  return share_of_update(microbatch / rule_.update_every + 1);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::adamw(int version, bool tied, const Element* gradients, const AdamWGate* gate,
                                             cudaStream_t stream) {
  // Update v's microbatches are (v - 1) K .. v K - 1 of this run, all in one step (K divides m);
  // AdamW counts the run's updates after those of the steps before it (a resumed run's).
  const double learning_rate = learning_rates_.at(size_t(version * rule_.update_every - 1) / m_);
  const int count = version + (first_step_ - 1) * m_ / rule_.update_every;
  // bf16: the synchronous schedules' rounding with the update's count for their step: every
  // layout rounds element i of update t with the bits of (seed, t, i in the whole model), and the
  // tied copy (wte's full offset, stage 0's count) as stage 0's wte.
  const uint64_t key = rounding_key(optimizer_.rounding_seed, uint64_t(count));
  const size_t first = tied ? 0 : tied_count_, n = tied ? tied_count_ : layout_.size - tied_count_;
  const AdamWLaunchTables& tables = adamw_tables_.launches[tied ? kTiedLaunch : kOthersLaunch];
  float* master = optimizer_.master == nullptr ? nullptr : optimizer_.master + first;
  adamw_update_regions<Element>(parameters_ + first, master, gradients + first, optimizer_.m + first,
                                optimizer_.v + first, n, tables.regions, tables.block_regions, learning_rate,
                                settings_.beta1, settings_.beta2, settings_.eps, settings_.weight_decay, gate, count,
                                key, stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::sum_over_replicas(Element* gradients, cudaStream_t stream) {
  // The whole allocation at once but the tied copy's gradient, first in it (zero here, summed with
  // the head's share in exchange_tied_gradient instead). Elementwise in rank order, as the
  // synchronous schedules' buckets: the cut into ranges cannot change a bit.
  allreduce_data_parallel_gradients(groups_, gradients + tied_count_, layout_.size - tied_count_,
                                    nccl_data_type<Element>(), stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::complete_gradient(int version, Element* gradients, cudaStream_t stream) {
  const size_t wte_count = size_t(config_.padded_vocab_size) * config_.channels;
  inject_nan_if_asked(groups_.mesh.world_rank, version, layout_, gradients, stream);
  Element* const grad_wte = wte_gradient(gradients);
  if (embedding_ && head_) {
    sum_tied_embedding_gradient(config_, grad_wte, ring_[0], stream);
    CUDA_CHECK(cudaMemsetAsync(ring_[0], 0, wte_count * sizeof(Element), stream));
  } else if (embedding_) {  // with the last stage's exchange_tied_gradient(version)
    allreduce_tied_embedding_gradient(groups_, grad_wte, wte_count, nccl_data_type<Element>(), stream);
  }
  sum_over_replicas(gradients, stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::decide(int version, const Element* gradients, cudaStream_t stream) {
  decided_.push_back(version);
  queue_gradient_norm(optimizer_, groups_, gradients, stream);
  set_adamw_gate(gates_ + slot(version), norms_ + slot(version), optimizer_.squared_norm, optimizer_.nonfinite_ranks,
                 settings_.grad_clip, stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::gate_on_own_sum(AdamWGate* gate, double* norm, const Element* gradients,
                                                       size_t count, cudaStream_t stream) {
  global_norm_squared<Element>(own_sum_, nullptr, own_workspace_, &gradients, &count, 1, stream);
  set_adamw_gate(gate, norm, own_sum_, own_nonfinite_, 0.0, stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::update(int version, Element* gradients, cudaStream_t stream) {
  if (!rule_.vertical_sync) {  // the stage's own gate: no exchange, no wait
    decided_.push_back(version);
    gate_on_own_sum(gates_ + slot(version), norms_ + slot(version), gradients + tied_count_,
                    layout_.size - tied_count_, stream);
  }
  adamw(version, false, gradients, gates_ + slot(version), stream);
  CUDA_CHECK(cudaMemsetAsync(gradients, 0, layout_.size * sizeof(Element), stream));
}

template <typename Element>
std::vector<int> TrainerPipeDreamUpdates<Element>::queue_decisions_download(cudaStream_t stream) {
  CUDA_CHECK(cudaMemcpyAsync(host_gates_.data(), gates_, host_gates_.size() * sizeof(AdamWGate),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaMemcpyAsync(host_norms_.data(), norms_, host_norms_.size() * sizeof(double), cudaMemcpyDeviceToHost,
                             stream));
  std::vector<int> decided;
  decided.swap(decided_);
  return decided;
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::exchange_tied_gradient(int version, cudaStream_t stream) {
  const size_t wte_count = size_t(config_.padded_vocab_size) * config_.channels;
  allreduce_tied_embedding_gradient(groups_, share_of_update(version), wte_count, nccl_data_type<Element>(), stream);
  // Then over the replicas, as stage 0 sums its wte after the same all-reduce (update): both
  // copies take the same sum of the same replicas' shares, in rank order.
  allreduce_data_parallel_gradients(groups_, share_of_update(version), wte_count, nccl_data_type<Element>(), stream);
}

template <typename Element>
void TrainerPipeDreamUpdates<Element>::bring_tied_embedding_to(int version, cudaStream_t stream) {
  const size_t wte_count = size_t(config_.padded_vocab_size) * config_.channels;
  while (tied_version_ < version) {
    tied_version_ += 1;
    Element* share = share_of_update(tied_version_);  // the two shares' sum (exchange_tied_gradient)
    // The tied copy's gradient region is zero here: only this function writes it.
    sum_tied_embedding_gradient(config_, wte_gradient(gradients_), share, stream);
    // Without vertical sync the copy takes stage 0's wte update only when the sum of squares of
    // the wte gradient it takes is finite (stage 0's own gate sums the same values among its
    // others).
    const AdamWGate* gate = gates_ + slot(tied_version_);
    if (!rule_.vertical_sync) {
      gate_on_own_sum(tied_gate_, tied_norm_, wte_gradient(gradients_), wte_count, stream);
      gate = tied_gate_;
    }
    adamw(tied_version_, true, gradients_, gate, stream);
    CUDA_CHECK(cudaMemsetAsync(wte_gradient(gradients_), 0, wte_count * sizeof(Element), stream));
    CUDA_CHECK(cudaMemsetAsync(share, 0, wte_count * sizeof(Element), stream));
  }
}

template class TrainerPipeDreamUpdates<float>;
template class TrainerPipeDreamUpdates<__nv_bfloat16>;
