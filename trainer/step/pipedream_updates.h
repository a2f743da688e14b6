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
// and the head's share after the same all-reduce on the last stage. With vertical sync each
// update's gradient norm over every stage (the replicas' sum; the layout-independent norm of
// trainer/step/optimizer.h, queued in the step of the update when its gradient is complete on the
// stage) decides its AdamW as the synchronous step's does: clipped by --grad-clip, and not applied
// at all on any stage when the norm is not finite (the non-finite guard). Without vertical sync
// there is no global norm (clipping is refused there: the options' check), and a stage applies update v
// before the stages below it have their gradients of v, so no skip can be agreed: each stage gates
// its own update v by its own gradient of v, the tied copy its update by the wte gradient it takes,
// with the synchronous guard's rule on this rank alone: applied when the fp32 sum of squares is
// finite (no sum over ranks, no clipping; on the device, no wait), so that no non-finite gradient
// is ever applied, and the step's end stops the run (trainer/step/pipedream_step.cpp).
// TRAIN_TEST_NAN (trainer/safety/failure_injection.h) names an update by its number as `step`.
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
  void complete_gradient(int version, Element* gradients, cudaStream_t stream) override;
  void decide(int version, const Element* gradients, cudaStream_t stream) override;
  void update(int version, Element* gradients, cudaStream_t stream) override;
  void exchange_tied_gradient(int version, cudaStream_t stream) override;
  void bring_tied_embedding_to(int version, cudaStream_t stream) override;
  Element* head_share(int microbatch) override;
  int update_every() const { return rule_.update_every; }
  bool vertical_sync() const { return rule_.vertical_sync; }
  // The updates decided since the last call (in order), and their decisions (norm, applied) copied
  // to the host on stream (read after the step's wait): update `version`'s, among the last
  // pipedream_decisions_kept. Without vertical sync: the stage's updates applied or skipped by
  // its own gate since the last call (the norm its gate read, not reported).
  std::vector<int> queue_decisions_download(cudaStream_t stream);
  double norm(int version) const { return host_norms_[slot(version)]; }
  bool applied(int version) const { return host_gates_[slot(version)].apply != 0; }

 private:
  // Without vertical sync: *gate (=) applied when the fp32 sum of squares of gradients' count
  // elements (this rank's alone, the global norm's reduction) is finite, never clipped; *norm (=)
  // its root (not reported). Sums into own_sum_ with own_workspace_.
  void gate_on_own_sum(AdamWGate* gate, double* norm, const Element* gradients, size_t count, cudaStream_t stream);
  // AdamW step `version` over the stage's regions that are (tied) or are not (!tied) wte's copy,
  // with `gradients` (the stage's allocation), as gate (device) says.
  void adamw(int version, bool tied, const Element* gradients, const AdamWGate* gate, cudaStream_t stream);
  size_t slot(int version) const { return size_t(version) % host_gates_.size(); }
  Element* share_of_update(int version);
  // wte's gradient in one of the stage's gradient buffers (nullptr on a stage without wte).
  Element* wte_gradient(Element* gradients) const {
    return wte_offset_ == kNoWte ? nullptr : gradients + wte_offset_;
  }
  // dp > 1: update v's gradients (wte's with the head's share) summed over the stage's replicas
  // before its AdamW, on the compute stream: the update waits for the sum (no overlap).
  void sum_over_replicas(Element* gradients, cudaStream_t stream);

  GPTConfig config_;
  PipeDreamRule rule_;
  int m_;
  ParameterLayout layout_;
  CommGroups groups_;
  Optimizer optimizer_;
  Element *parameters_, *gradients_;
  static constexpr size_t kNoWte = size_t(-1);
  size_t wte_offset_ = kNoWte;  // wte's (or its tied copy's) offset in the stage's layout
  bool embedding_, head_;
  std::vector<Element*> ring_;  // the head's shares: update u's at u % size (grad_wte_head with the embedding)
  bool owns_ring_;
  size_t tied_count_ = 0;  // tied_copy_count: the tied copy's elements, first in the layout (0 on other stages)
  // AdamW's tables of its two launches: the other regions from tied_count_, then the tied copy's.
  static constexpr int kOthersLaunch = 0, kTiedLaunch = 1;
  AdamWTables adamw_tables_;
  AdamWGate* gates_;  // (pipedream_decisions_kept) update v's decision at v % size
  double* norms_;     // (the same) its norm
  // Without vertical sync, the own gates' scratch (else nullptr), apart from the optimizer's norm
  // buffers so that no norm queued elsewhere can overwrite a sum before its gate reads it.
  float* own_sum_ = nullptr;             // (1) the sum of squares
  float* own_workspace_ = nullptr;       // (global_norm_workspace_size(1))
  double* own_nonfinite_ = nullptr;      // (1) zero: the own gate flags no loss
  AdamWGate* tied_gate_ = nullptr;       // (1) the tied copy's update's gate, read at once
  double* tied_norm_ = nullptr;          // (1) its norm (not reported)
  std::vector<AdamWGate> host_gates_;
  std::vector<double> host_norms_;
  std::vector<int> decided_;  // since queue_decisions_download
  int tied_version_ = 0;  // the version of the tied copy (stage with the head, not the embedding)
  AdamWSettings settings_{};
  int first_step_ = 0;                  // the run's first t; 0 before set_step
  std::vector<double> learning_rates_;  // per step from the first: [t - first_step_]
};
