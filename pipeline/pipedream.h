// PipeDream's asynchronous pipeline (Narayanan et al., "PipeDream: Generalized Pipeline Parallelism
// for DNN Training", SOSP 2019) as data: 1F1B without a flush, each stage updating its weights after
// every K-th backward, and which weight version each forward and backward uses (docs/pipeline.md,
// "The asynchronous pipeline", derives the rule).
//
// Microbatches are numbered k = 0, 1, ... over the whole run. Stage s of p keeps w_s = p - s of them
// in flight and runs 1F1B once for the run: F0 .. F(w_s - 1), then B(j), F(j + w_s), B(j + 1), ...
// A version is the number of updates the stage has applied; an update U(v) runs after the stage's
// (v K)-th backward. Then, for microbatch k on stage s:
//   forward, with or without stashing      floor(max(0, k - w_s + 1) / K)   (the B's run before it)
//   backward, weight stashing (default)    the forward's version
//   backward, --weight-stashing off        floor(k / K), the latest (Pipelined BP's delayed updates)
//   both, --vertical-sync                  stage 0's forward version, floor(max(0, k - p + 1) / K)
//
// Steps: a step of m microbatches is a unit of logging and checkpoints, not a flush. Each stage's
// run-long list is cut after its backward of microbatch (t + 1) m - 1 (and the update after it), so
// the warm-up falls in the first step and the cool-down in the last. The forward of microbatch
// (t + 1) m + w_s - 2 ends step t on stage s, but stage s + 1 runs it in step t + 1. Its message is
// received at the end of step t on stage s + 1, in the group 1F1B posts there anyway with the
// gradient of the step's last backward, and the activation waits in its slot for the next step. So
// every send and its receive fall in the same step on both ranks, a step's one host wait never waits
// on a peer's next step (a GPU's large ncclSend completes only when the receive is posted), and no
// stage idles at a step's end. Posting the send at the start of the next step instead would hold
// stage s + 1 for one backward at every step's end (2 of 26 time units a step at p = 4, m = 8, with
// B = 2 F: tests/pipedream_test.cu's simulation).
//
// Drains: the steps (1, 2, ..., before the last) after which the pipeline drains, for a checkpoint
// (docs/pipeline.md, "Checkpoints"): the step ends with a cool-down and the next warms up again, as
// if a run ended there and a new one began, its microbatches numbered on and its versions counted
// on from the updates before. Every function below that takes drains cuts the run there (none: the
// run drains at its end only); the executor's lists, the memory plan and the reference cut alike.
#pragma once

#include <string>
#include <vector>

#include "pipeline/action.h"

struct PipeDreamRule {
  int update_every = 1;         // K: backwards per update
  bool weight_stashing = true;  // a backward uses its forward's version
  bool vertical_sync = false;   // every stage uses stage 0's forward version (needs stashing)
};

// Throws std::runtime_error with one line when p, m or steps is below 1, K does not divide m
// (an update would straddle a step's end, where checkpoints are written), or vertical sync is
// asked for without weight stashing.
void check_pipedream(const PipeDreamRule& rule, int p, int m, int steps);
// Throws one line when drains are not in increasing order within [1, steps).
void check_pipedream_drains(int steps, const std::vector<int>& drains);
// The drains of a run of `steps` steps after step first_step of the whole (a resumed run's) for
// intervals N (--save-every, --val-every, --sample-every; 0: none): each of its steps whose number in
// the whole run is a multiple of one of them, but its last, in increasing order.
std::vector<int> pipedream_drains_every(const std::vector<int>& intervals, int first_step, int steps);
// The first microbatch of the part of the run (between drains) that holds microbatch k.
int pipedream_part_start(int m, const std::vector<int>& drains, int microbatch);
// A stop signal seen after step `done` (1, 2, ...) of a run cut at drains: the first step whose end
// can drain without changing the lists of the steps already run: a drain already there, else the
// first whose m microbatches hold stage 0's forwards so far (done m + p - 1 microbatches; one more
// with vertical sync, whose update of the step's last microbatch waits for its first use). At
// m >= p - 1 (m >= p with vertical sync) the next step; done itself at p = 1 without vertical sync
// (nothing in flight at a step's end); at most the run's last.
int pipedream_stop_drain(const PipeDreamRule& rule, int p, int m, int steps, const std::vector<int>& drains, int done);

// w_s = p - s: the microbatches stage s holds between its forward and its backward.
int pipedream_in_flight(int p, int stage);
// The weight version (updates applied) microbatch k's forward and backward use on stage s.
int pipedream_forward_version(const PipeDreamRule& rule, int p, int stage, int microbatch);
int pipedream_backward_version(const PipeDreamRule& rule, int p, int stage, int microbatch);

enum class PipeDreamKind { forward, backward, update };
struct PipeDreamAction {
  PipeDreamKind kind;
  int microbatch;  // -1 for an update
  int version;     // the weights used (F, B), or the version an update makes (U)
  bool operator==(const PipeDreamAction&) const = default;
};
// "F5@2" (the forward of microbatch 5 with version 2), "B3@1", "U2" (the update that makes version 2);
// a list joins its actions with spaces.
std::string to_text(const PipeDreamAction& action);
std::string to_text(const std::vector<PipeDreamAction>& actions);

// Stage s's actions over a run of `steps` steps of m microbatches, cut into steps (index = step).
std::vector<std::vector<PipeDreamAction>> pipedream_steps(const PipeDreamRule& rule, int p, int m, int steps,
                                                          int stage, const std::vector<int>& drains = {});
// The most weight versions stage s holds at once over such a run: the current one and every older
// one an action still to run uses (counted from the order, not from a formula). A run of
// 4 + 4p / m steps reaches the steady state's count: 3 times as long a run kept no more for any
// p <= 8, m in {1, 2, 3, 4, 8, 16}, K dividing m, each mode and stage (2026-11-27). With K = 1:
// p - s with stashing, 1 without, p - s with vertical sync (its updates wait for their first use).
int pipedream_versions_kept(const PipeDreamRule& rule, int p, int m, int steps, int stage,
                            const std::vector<int>& drains = {});
// With vertical sync, the updates no forward uses (v K + p > m steps: the cool-down's) wait for the
// run's end, where their norms are summed (pipeline/pipedream_run.h says why); with drains, the end
// of the update's part of the run.
bool pipedream_decided_at_end(const PipeDreamRule& rule, int p, int m, int steps, int version,
                              const std::vector<int>& drains = {});
// The most updates whose gradients stage s holds apart at once over such a run: an update's from
// its first backward to the update (counted from the order). 1 but with vertical sync, where the
// backwards after update v's last one add up the next updates' gradients until v's first use:
// ceil(s / K) + 1 in the steady state, and in the cool-down up to every update left. Each is a
// gradient allocation of the stage (pipeline/pipedream_run.h).
int pipedream_gradients_kept(const PipeDreamRule& rule, int p, int m, int steps, int stage,
                             const std::vector<int>& drains = {});

// The buffers of Vp C in which the head stage (without the embedding) sums its shares of wte's
// gradient until each update's exchange with stage 0 (trainer/step/pipedream_updates.h):
// (p - 2) / K + 2, the updates whose shares are open at once. The memory plan counts them.
int pipedream_head_ring_size(const PipeDreamRule& rule, int p);
// The updates whose decisions (norm, clipping, applied or not) a stage keeps on the device
// (trainer/step/pipedream_updates.h), all read at the end of the step that makes them: a step's
// m / K and the cool-down's ceil(p / K) (decided at the run's end), and one more. An update's
// decision waits at most ceil(s / K) + 1 later ones for its use (pipedream_gradients_kept). The
// memory plan counts them.
int pipedream_decisions_kept(const PipeDreamRule& rule, int p, int m);

// The run's lists with their sends and receives, per step: [step][stage]. Each is the 1F1B lowering
// (pipeline/schedule.h's add_communication) of the run-long order, cut as the top says.
std::vector<std::vector<StageSchedule>> pipedream_step_schedules(int p, int m, int steps,
                                                                const std::vector<int>& drains = {});
// The same lists joined per stage: the whole run as the simulator takes it (pipeline/simulate.h).
std::vector<StageSchedule> pipedream_run_schedules(int p, int m, int steps, const std::vector<int>& drains = {});

// The --print-schedule text: each stage's actions with versions, step by step, and the versions
// each stage keeps.
std::string format_pipedream(const PipeDreamRule& rule, int p, int m, int steps, const std::vector<int>& drains = {});
