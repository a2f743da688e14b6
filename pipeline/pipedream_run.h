// What the executor (pipeline/execute.h) keeps to run PipeDream's asynchronous pipeline
// (pipeline/pipedream.h; docs/pipeline.md, "The asynchronous pipeline"), and what it asks of its
// owner, through PipeDreamUpdates, at each update.
//
// The run. The executor walks step t's list of pipedream_step_schedules (t = 0, 1, ...): its pools
// are planned over the whole run's lists, so a microbatch in flight at a step's end keeps its slot
// into the next step, and stage 0's forwards read up to p - 1 microbatches of the next step's data.
//
// Versions. The stage's own parameters are always the latest version. An action that uses an
// older one reads a stash: a copy of the parameters made on the compute stream just before the
// update that would overwrite a version some later action still uses, and freed after that
// action. The stashes are allocated once, pipedream_versions_kept - 1 of them (the count the
// schedule gives), each the stage's parameter allocation. On the stage that holds wte's tied copy
// for the head (not the embedding), wte is never read from a stash: its copy has stage 0's
// version sequence, brought to the version the next forward needs by the owner
// (bring_tied_embedding_to), so the live copy is the one every action of that microbatch uses.
// Its gradient's exchange with stage 0 comes earlier, in the step of the update (a step's host
// wait must not wait on a peer's next step): after the group that sends the gradient of the
// update's last microbatch, which stage 0 receives before its backward of it and its update.
//
// Gradients. With vertical sync update v waits for the stage's first use of version v
// (pipeline/pipedream.h's order), so that stage 0's gradient of it, the last one, is in its norm.
// Meanwhile the stage's later backwards add up the next updates' gradients: update u's go to
// gradients[u % size], pipedream_gradients_kept allocations of the stage (the first the caller's,
// the others allocated here), each zeroed by its update. An update's gradient is complete on a
// stage after the backward of its last microbatch; on stage 0 (or without vertical sync) its
// sums and norm are queued right then, elsewhere after the group that sends that backward's
// gradient, which stage 0 receives before its own: every stage joins the norm's all-reduce of
// update v after all its messages that stage 0's backward of v's last microbatch waits for, and
// before any that stage 0 sends after it, one order on every rank. That holds while every stage
// runs 1F1B's steady groups around that backward (its gradient's send joined with a forward's
// receive); in the cool-down a stage joins its gradient's send with the next gradient's receive
// from above, which its neighbour above sends after its own norm of v: each would wait for the
// other (a deadlock the CPU build's NCCL showed at p = 4). So the updates no forward uses
// (pipedream_decided_at_end: the cool-down's) are decided, in order, at the end of the run's last
// step, after every transfer, and applied there.
#pragma once
#include <cuda_runtime.h>

#include <memory>
#include <vector>

#include "model/parameter_layout.h"
#include "model/parameters.h"
#include "pipeline/pipedream.h"
#include "pipeline/schedule.h"

// Implemented by the trainer (trainer/step/pipedream_updates.h): the pipeline does not know the
// optimizer. Every call queues its work on stream and returns without waiting.
template <typename Element>
class PipeDreamUpdates {
 public:
  virtual ~PipeDreamUpdates() = default;
  // Update `version` (1, 2, ...)'s gradient is complete in `gradients` (the stage's allocation):
  // its sums (on stage 0 wte's with the head's share, over the replicas).
  virtual void complete_gradient(int version, Element* gradients, cudaStream_t stream) = 0;
  // With vertical sync, after complete_gradient: its norm over every stage, which decides its
  // clipping and whether it is applied at all.
  virtual void decide(int version, const Element* gradients, cudaStream_t stream) = 0;
  // Update `version` of the stage's own tensors (wte on stage 0) with the gradient of its K
  // microbatches in `gradients`, as complete_gradient decided, then zeroes them.
  virtual void update(int version, Element* gradients, cudaStream_t stream) = 0;
  // On the stage with wte's tied copy only: the exchange of update `version`'s gradient of wte
  // with stage 0 (its update's), after the group that sends its last microbatch's gradient.
  virtual void exchange_tied_gradient(int version, cudaStream_t stream) = 0;
  // On the same stage: brings the copy to stage 0's version `version` (each version's update in
  // order, none twice, each after its exchange), before anything that needs it.
  virtual void bring_tied_embedding_to(int version, cudaStream_t stream) = 0;
  // On the stage with the head: where the head's share of wte's gradient of microbatch k adds up.
  virtual Element* head_share(int microbatch) = 0;
};

template <typename Element>
struct PipeDreamRun {
  PipeDreamRule rule;
  int m, steps;
  std::vector<int> drains;                    // the steps (1, 2, ...) after which it drains (pipeline/pipedream.h)
  int step = 0;                               // the next execute_step's, from 0
  std::vector<StageSchedule> step_schedules;  // [step] the stage's list (pipedream_step_schedules)
  std::vector<PipeDreamAction> order;         // the stage's whole run (pipedream_steps, joined)
  std::vector<int> last_use;                  // per version: the index in order of its last F or B
  std::vector<size_t> step_end;               // per step: the index in order after its last action
  size_t next = 0;                            // the index in order of the next action
  int current = 0;                            // the version in the stage's own parameters
  ParameterLayout layout;                     // the stage's
  Element* parameters;                        // the stage's own (the latest version)
  std::vector<Element*> stashes;              // (layout.size) each
  std::vector<int> stash_version;             // per stash: the version it holds; -1: free
  std::vector<Element*> gradients;            // (layout.size) each: update u's at u % size; [0] the caller's
  bool tied_copy;                             // the stage holds wte's copy for the head
  std::shared_ptr<PipeDreamUpdates<Element>> updates;
};
