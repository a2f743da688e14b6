// The trainer's side of PipeDream's asynchronous pipeline (pipeline/pipedream_run.h): each update
// of a stage's own tensors, AdamW at t = the update's number with the learning rate of the step
// its microbatches belong to, and the tied embedding (docs/pipeline.md, "The asynchronous
// pipeline"). A resumed run starts with the pipeline empty (its checkpoint was saved drained) and
// its versions from 0 again: AdamW's count continues from the updates before, (t_first - 1) m / K.
// bf16 parameters update as the synchronous schedules' (trainer/step/optimizer.h): into the fp32
// master weights when there are any, rounded stochastically with rounding_key(seed, the update's
// AdamW count) at each element's index in the whole model; the stashes are bf16, the forward's.
// wte has stage 0's version sequence: stage 0's update v sums the embedding's share of
// its gradient with the head's (one all-reduce of Vp C on the embedding communicator) and updates
// wte. The last stage joins that all-reduce with its head share of update v once it has sent the
// gradient of v's last microbatch (stage 0 receives it before its own backward of that microbatch
// and its update, so neither waits on the other's later work, and both are in the same step), and
// applies the same AdamW to its copy only when its next forward needs version v, so that its copy
// is the version every use of that microbatch takes. The shares (summed in place) wait for it in a
// ring of (p - 2) / K + 2 buffers of Vp C. With replicas (dp > 1) each stage's update v sums its
// gradients over its data-parallel group first, wte's after the embedding all-reduce on stage 0
// and the head's share after the same all-reduce on the last stage. No clipping and no non-finite guard (refused with
// pipedream: the options' check).
#pragma once
#include <cuda_runtime.h>

#include <vector>

#include "comm/groups.h"
#include "model/config.h"
#include "model/parameter_layout.h"
#include "pipeline/pipedream_run.h"
#include "trainer/step/optimizer.h"

template <typename Element>
class TrainerPipeDreamUpdates : public PipeDreamUpdates<Element> {
 public:
  // The stage's allocations and optimizer (pointers kept, not owned); allocates the head's ring.
  TrainerPipeDreamUpdates(const GPTConfig& config, const PipeDreamRule& rule, int p, int m, const ParameterLayout& layout,
                          const CommGroups& groups, const Optimizer& optimizer, Element* parameters,
                          Element* gradients, Element* grad_wte_head);
  ~TrainerPipeDreamUpdates() override;
  // Before step t's execute_step (t in order from the run's first, 1 or a resumed run's step + 1):
  // its AdamW settings and learning rate.
  void set_step(const AdamWSettings& settings, int t, double learning_rate);
  void update(int version, cudaStream_t stream) override;
  void exchange_tied_gradient(int version, cudaStream_t stream) override;
  void bring_tied_embedding_to(int version, cudaStream_t stream) override;
  Element* head_share(int microbatch) override;
  int update_every() const { return rule_.update_every; }

 private:
  // AdamW step `version` over the stage's regions that are (tied) or are not (!tied) wte's copy.
  void adamw(int version, bool tied, cudaStream_t stream);
  Element* share_of_update(int version);
  // dp > 1: update v's gradients (wte's with the head's share) summed over the stage's replicas
  // before its AdamW, on the compute stream: the update waits for the sum (no overlap).
  void sum_over_replicas(cudaStream_t stream);

  GPTConfig config_;
  PipeDreamRule rule_;
  int m_;
  ParameterLayout layout_;
  CommGroups groups_;
  Optimizer optimizer_;
  Element *parameters_, *gradients_, *grad_wte_;
  bool embedding_, head_;
  std::vector<Element*> ring_;  // the head's shares: update u's at u % size (grad_wte_head with the embedding)
  bool owns_ring_;
  int tied_version_ = 0;  // the version of the tied copy (stage with the head, not the embedding)
  AdamWSettings settings_{};
  int first_step_ = 0;                  // the run's first t; 0 before set_step
  std::vector<double> learning_rates_;  // per step from the first: [t - first_step_]
};
