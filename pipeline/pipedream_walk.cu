// The executor's steps of PipeDream's asynchronous pipeline (pipeline/pipedream_walk.h).
#include "pipeline/pipedream_walk.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"

namespace {

// The tied copy's version microbatch k needs: stage 0's forward's, counted on from its part's start.
template <typename Element>
int tied_version(const PipeDreamRun<Element>& run, int p, int microbatch) {
  const int start = pipedream_part_start(run.m, run.drains, microbatch);
  return start / run.rule.update_every + pipedream_forward_version(run.rule, p, 0, microbatch - start);
}

// Whether the pipeline drains after step `step` (1, 2, ...): the run's last, or a drain.
template <typename Element>
bool ends_part(const PipeDreamRun<Element>& run, int step) {
  return step == run.steps || std::find(run.drains.begin(), run.drains.end(), step) != run.drains.end();
}

// The run's lists cut at run.drains: each step's list, the order and each version's last use.
template <typename Element>
void cut_run(PipeDreamRun<Element>& run, int p, int stage) {
  run.step_schedules.clear();
  for (const std::vector<StageSchedule>& step : pipedream_step_schedules(p, run.m, run.steps, run.drains))
    run.step_schedules.push_back(step[stage]);
  run.order.clear();
  run.step_end.clear();
  for (const std::vector<PipeDreamAction>& step : pipedream_steps(run.rule, p, run.m, run.steps, stage, run.drains)) {
    run.order.insert(run.order.end(), step.begin(), step.end());
    run.step_end.push_back(run.order.size());
  }
  run.last_use.assign(run.m * run.steps / run.rule.update_every + 1, -1);
  for (size_t i = 0; i < run.order.size(); ++i)
    if (run.order[i].kind != PipeDreamKind::update) run.last_use[run.order[i].version] = int(i);
}

template <typename Element>
int stash_of(const PipeDreamRun<Element>& run, int version) {
  for (size_t i = 0; i < run.stash_version.size(); ++i)
    if (run.stash_version[i] == version) return int(i);
  return -1;
}

template <typename Element>
Element* gradients_of_update(const PipeDreamRun<Element>& run, int version) {
  return run.gradients[size_t(version) % run.gradients.size()];
}

// Update v's gradient is complete on the stage: its sums, and with vertical sync its decision
// unless that waits for the run's end.
template <typename Element>
void complete_gradient(Executor<Element>& e, int version) {
  PipeDreamRun<Element>& run = *e.pipedream;
  Element* const gradients = gradients_of_update(run, version);
  run.updates->complete_gradient(version, gradients, e.stream);
  if (run.rule.vertical_sync && !pipedream_decided_at_end(run.rule, e.p, run.m, run.steps, version, run.drains))
    run.updates->decide(version, gradients, e.stream);
}

// The updates at the head of what is left of the order, before index end: each after a stash of
// the version it overwrites when a later action still uses that.
template <typename Element>
void apply_updates_before(Executor<Element>& e, size_t end) {
  PipeDreamRun<Element>& run = *e.pipedream;
  for (; run.next < end && run.order[run.next].kind == PipeDreamKind::update; ++run.next) {
    if (run.last_use[run.current] > int(run.next)) {
      const int stash = stash_of(run, -1);
      if (stash < 0)
        throw std::logic_error("pipedream: stage " + std::to_string(e.stage) + " has no free stash for version " +
                               std::to_string(run.current));
      CUDA_CHECK(cudaMemcpyAsync(run.stashes[stash], run.parameters, run.layout.size * sizeof(Element),
                                 cudaMemcpyDeviceToDevice, e.stream));
      run.stash_version[stash] = run.current;
    }
    run.current = run.order[run.next].version;
    run.updates->update(run.current, gradients_of_update(run, run.current), e.stream);
  }
}

}  // namespace

template <typename Element>
void enable_pipedream(Executor<Element>& e, const PipeDreamRule& rule, int m, int steps, const ParameterLayout& layout,
                      Element* parameters, Element* gradients, std::shared_ptr<PipeDreamUpdates<Element>> updates,
                      const std::vector<int>& drains) {
  auto run = std::make_shared<PipeDreamRun<Element>>();
  run->rule = rule;
  run->m = m;
  run->steps = steps;
  run->drains = drains;
  cut_run(*run, e.p, e.stage);
  run->layout = layout;
  run->parameters = parameters;
  const int kept = pipedream_versions_kept(rule, e.p, m, steps, e.stage, drains);
  for (int i = 0; i + 1 < kept; ++i) run->stashes.push_back(device_alloc<Element>(layout.size));
  run->stash_version.assign(run->stashes.size(), -1);
  run->gradients = {gradients};
  for (int i = 1; i < pipedream_gradients_kept(rule, e.p, m, steps, e.stage, drains); ++i) {
    run->gradients.push_back(device_alloc<Element>(layout.size));
    CUDA_CHECK(cudaMemset(run->gradients.back(), 0, layout.size * sizeof(Element)));
  }
  run->tied_copy = false;
  for (const ParameterRegion& r : layout.regions) run->tied_copy = run->tied_copy || r.tied_copy;
  run->updates = std::move(updates);
  e.pipedream = std::move(run);
}

template <typename Element>
void destroy_pipedream(Executor<Element>& e) {
  if (!e.pipedream) return;
  for (Element* stash : e.pipedream->stashes) device_free(stash);
  for (size_t i = 1; i < e.pipedream->gradients.size(); ++i) device_free(e.pipedream->gradients[i]);
  e.pipedream.reset();
}

template <typename Element>
void begin_pipedream_step(Executor<Element>& e) {
  PipeDreamRun<Element>& run = *e.pipedream;
  if (run.step >= run.steps)
    throw std::runtime_error("execute_step: the pipedream run has " + std::to_string(run.steps) + " steps, all run");
  e.schedule = run.step_schedules[run.step];
  e.trace.resize(e.schedule.size());
  e.first_microbatch = run.step * run.m;
}

template <typename Element>
void after_pipedream_transfer(Executor<Element>& e, const Step& step) {
  PipeDreamRun<Element>& run = *e.pipedream;
  const int K = run.rule.update_every;
  for (const Action& a : step) {
    if (a.kind != ActionKind::send_backward || (a.microbatch + 1) % K != 0) continue;
    const int version = (a.microbatch + 1) / K;
    if (run.tied_copy) run.updates->exchange_tied_gradient(version, e.stream);
    if (run.rule.vertical_sync) complete_gradient(e, version);
  }
}

template <typename Element>
std::vector<ParameterTensors<Element>> pipedream_views(Executor<Element>& e, const Action& action,
                                                       const std::vector<ParameterTensors<Element>>& params) {
  PipeDreamRun<Element>& run = *e.pipedream;
  apply_updates_before(e, run.order.size());
  const PipeDreamAction& planned = run.order.at(run.next);
  const PipeDreamKind kind = action.kind == ActionKind::forward ? PipeDreamKind::forward : PipeDreamKind::backward;
  if (planned.kind != kind || planned.microbatch != action.microbatch)
    throw std::logic_error("pipedream: stage " + std::to_string(e.stage) + " runs " + to_text(action) +
                           " where its order has " + to_text(planned));
  if (run.tied_copy && kind == PipeDreamKind::forward)
    run.updates->bring_tied_embedding_to(tied_version(run, e.p, action.microbatch), e.stream);
  if (planned.version == run.current) return params;
  const int stash = stash_of(run, planned.version);
  if (stash < 0)
    throw std::logic_error("pipedream: stage " + std::to_string(e.stage) + " holds no version " +
                           std::to_string(planned.version) + " for " + to_text(planned));
  std::vector<ParameterTensors<Element>> views = stage_views(run.stashes[stash], run.layout);
  for (size_t c = 0; c < views.size(); ++c) {
    views[c].pending = params[c].pending;
    if (run.tied_copy) views[c].wte = params[c].wte;  // stage 0's version sequence, kept live
  }
  return views;
}

template <typename Element>
std::vector<ParameterTensors<Element>> pipedream_gradient_views(Executor<Element>& e, const Action& action,
                                                                const std::vector<ParameterTensors<Element>>& grads) {
  const PipeDreamRun<Element>& run = *e.pipedream;
  Element* const gradients = gradients_of_update(run, action.microbatch / run.rule.update_every + 1);
  if (gradients == run.gradients[0]) return grads;
  std::vector<ParameterTensors<Element>> views = stage_views(gradients, run.layout);
  for (size_t c = 0; c < views.size(); ++c) {
    views[c].pending = grads[c].pending;
    if (run.tied_copy) views[c].wte = grads[c].wte;  // the head's share goes to its own ring instead
  }
  return views;
}

template <typename Element>
Element* pipedream_head_share(Executor<Element>& e, const Action& action, Element* grad_wte_head) {
  if (!e.pipedream || grad_wte_head == nullptr) return grad_wte_head;
  return e.pipedream->updates->head_share(action.microbatch);
}

template <typename Element>
void after_pipedream_compute(Executor<Element>& e) {
  PipeDreamRun<Element>& run = *e.pipedream;
  const PipeDreamAction& done = run.order[run.next];
  const int used = stash_of(run, done.version);
  if (done.version != run.current && run.last_use[done.version] == int(run.next)) run.stash_version[used] = -1;
  run.next += 1;
  const int K = run.rule.update_every;
  if (done.kind == PipeDreamKind::backward && (done.microbatch + 1) % K == 0 && (e.stage == 0 || !run.rule.vertical_sync))
    complete_gradient(e, (done.microbatch + 1) / K);
}

template <typename Element>
void end_pipedream_step(Executor<Element>& e) {
  PipeDreamRun<Element>& run = *e.pipedream;
  const int K = run.rule.update_every;
  // The end of a part of the run (a drain, or the run's end): its updates decided there, all
  // applied, and the tied copy at stage 0's last version.
  const bool drains = ends_part(run, run.step + 1);
  const int start = pipedream_part_start(run.m, run.drains, run.step * run.m), end = (run.step + 1) * run.m / K;
  if (drains)
    for (int v = start / K + 1; v <= end; ++v)
      if (pipedream_decided_at_end(run.rule, e.p, run.m, run.steps, v, run.drains))
        run.updates->decide(v, gradients_of_update(run, v), e.stream);
  apply_updates_before(e, run.step_end[size_t(run.step)]);
  run.step += 1;
  if (drains && run.tied_copy) run.updates->bring_tied_embedding_to(end, e.stream);
}

template <typename Element>
void drain_pipedream_after(Executor<Element>& e, int step) {
  PipeDreamRun<Element>& run = *e.pipedream;
  if (ends_part(run, step)) return;
  const std::vector<StageSchedule> ran(run.step_schedules.begin(), run.step_schedules.begin() + run.step);
  const std::vector<PipeDreamAction> ran_order(run.order.begin(), run.order.begin() + run.next);
  run.drains.insert(std::upper_bound(run.drains.begin(), run.drains.end(), step), step);
  cut_run(run, e.p, e.stage);
  // The steps run must be the new cut's (pipeline/pipedream.h's pipedream_stop_drain chooses such a
  // drain), and its versions and gradients fit what enable_pipedream allocated.
  const bool same = std::equal(ran.begin(), ran.end(), run.step_schedules.begin()) &&
                    std::equal(ran_order.begin(), ran_order.end(), run.order.begin());
  if (!same ||
      pipedream_versions_kept(run.rule, e.p, run.m, run.steps, e.stage, run.drains) > int(run.stashes.size()) + 1 ||
      pipedream_gradients_kept(run.rule, e.p, run.m, run.steps, e.stage, run.drains) > int(run.gradients.size()))
    throw std::logic_error("pipedream: stage " + std::to_string(e.stage) + " cannot drain after step " +
                           std::to_string(step) + " (" + (same ? "more versions or gradients" : "the steps run change") + ")");
  for (int& version : run.stash_version)  // a stash whose last use is now behind
    if (version >= 0 && run.last_use[version] < int(run.next)) version = -1;
}

#define INSTANTIATE_PIPEDREAM_WALK(Element)                                                                          \
  template void enable_pipedream<Element>(Executor<Element>&, const PipeDreamRule&, int, int, const ParameterLayout&, \
                                          Element*, Element*, std::shared_ptr<PipeDreamUpdates<Element>>,            \
                                          const std::vector<int>&);                                                  \
  template void destroy_pipedream<Element>(Executor<Element>&);                                                      \
  template void begin_pipedream_step<Element>(Executor<Element>&);                                                   \
  template void after_pipedream_transfer<Element>(Executor<Element>&, const Step&);                                 \
  template std::vector<ParameterTensors<Element>> pipedream_views<Element>(                                          \
      Executor<Element>&, const Action&, const std::vector<ParameterTensors<Element>>&);                             \
  template std::vector<ParameterTensors<Element>> pipedream_gradient_views<Element>(                                 \
      Executor<Element>&, const Action&, const std::vector<ParameterTensors<Element>>&);                             \
  template Element* pipedream_head_share<Element>(Executor<Element>&, const Action&, Element*);                                \
  template void after_pipedream_compute<Element>(Executor<Element>&);                                                \
  template void end_pipedream_step<Element>(Executor<Element>&);                                                     \
  template void drain_pipedream_after<Element>(Executor<Element>&, int);

INSTANTIATE_PIPEDREAM_WALK(float)
INSTANTIATE_PIPEDREAM_WALK(__nv_bfloat16)
