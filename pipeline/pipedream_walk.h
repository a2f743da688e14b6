// The executor's steps of PipeDream's asynchronous pipeline (pipeline/pipedream_run.h says what it
// keeps): which weight version each forward and backward reads, the stashes, and the update after
// every K-th backward. Used by pipeline/execute.cu's walk.
#pragma once
#include <memory>
#include <vector>

#include "pipeline/executor_state.h"

// Makes an executor created on the stage's list of pipedream_run_schedules(p, m, steps, drains) run
// that run under rule, one step of m microbatches per execute_step. parameters and gradients
// (layout.size each) are the stage's own, the views the caller passes to execute_step; the stashes
// and the gradients of the updates beyond the first held apart are allocated here.
template <typename Element>
void enable_pipedream(Executor<Element>& e, const PipeDreamRule& rule, int m, int steps, const ParameterLayout& layout,
                      Element* parameters, Element* gradients, std::shared_ptr<PipeDreamUpdates<Element>> updates,
                      const std::vector<int>& drains = {});
// A stop signal's drain: the run's lists cut after step `step` (1, 2, ...) too, from
// pipeline/pipedream.h's pipedream_stop_drain. Throws std::logic_error when the new cut would
// change a step already run or need more stashes or gradients than were allocated; nothing when the
// pipeline drains there already.
template <typename Element>
void drain_pipedream_after(Executor<Element>& e, int step);
// Frees the stashes and those gradients (destroy_executor calls it).
template <typename Element>
void destroy_pipedream(Executor<Element>& e);

// Before execute_step's walk: the step's list becomes e.schedule, its first microbatch
// e.first_microbatch. Throws (one line) past the run's last step.
template <typename Element>
void begin_pipedream_step(Executor<Element>& e);
// After a group: the send of the gradient of an update's last microbatch is followed, on the stage
// with wte's tied copy, by that update's exchange of wte's gradient with stage 0, then with vertical
// sync by its complete_gradient.
template <typename Element>
void after_pipedream_transfer(Executor<Element>& e, const Step& step);
// The views a compute reads, of the version its microbatch uses (params: the stage's own, the
// latest), after the updates the order puts before it; the gradient views a backward adds to (its
// update's allocation; grads: the caller's, the first); and where the head's share of wte's gradient of its microbatch goes (grad_wte_head, the
// stage's one buffer or nullptr, when not running pipedream or without the head).
template <typename Element>
std::vector<ParameterTensors<Element>> pipedream_views(Executor<Element>& e, const Action& action,
                                                       const std::vector<ParameterTensors<Element>>& params);
template <typename Element>
std::vector<ParameterTensors<Element>> pipedream_gradient_views(Executor<Element>& e, const Action& action,
                                                                const std::vector<ParameterTensors<Element>>& grads);
template <typename Element>
Element* pipedream_head_share(Executor<Element>& e, const Action& action, Element* grad_wte_head);
// After a compute is queued: frees a stash it used last; after the backward that completes an
// update, on stage 0 or without vertical sync, its complete_gradient.
template <typename Element>
void after_pipedream_compute(Executor<Element>& e);
// After the walk: the step's updates left, then the next step; after the last, the tied copy brought to stage 0's last version.
template <typename Element>
void end_pipedream_step(Executor<Element>& e);
