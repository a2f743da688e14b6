// The executor's steps of PipeDream's asynchronous pipeline (pipeline/pipedream_walk.h).
#include "pipeline/pipedream_walk.h"

#include <stdexcept>
#include <string>

#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"

namespace {

// The tied copy's version microbatch k needs: stage 0's forward's.
int tied_version(const PipeDreamRule& rule, int p, int microbatch) {
  return pipedream_forward_version(rule, p, 0, microbatch);
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
  if (run.rule.vertical_sync && !pipedream_decided_at_end(run.rule, e.p, run.m, run.steps, version))
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
                      Element* parameters, Element* gradients, std::shared_ptr<PipeDreamUpdates<Element>> updates) {
  auto run = std::make_shared<PipeDreamRun<Element>>();
  run->rule = rule;
  run->m = m;
  run->steps = steps;
  for (const std::vector<StageSchedule>& step : pipedream_step_schedules(e.p, m, steps))
    run->step_schedules.push_back(step[e.stage]);
  for (const std::vector<PipeDreamAction>& step : pipedream_steps(rule, e.p, m, steps, e.stage)) {
    run->order.insert(run->order.end(), step.begin(), step.end());
    run->step_end.push_back(run->order.size());
  }
  run->last_use.assign(m * steps / rule.update_every + 1, -1);
  for (size_t i = 0; i < run->order.size(); ++i)
    if (run->order[i].kind != PipeDreamKind::update) run->last_use[run->order[i].version] = int(i);
  run->layout = layout;
  run->parameters = parameters;
  const int kept = pipedream_versions_kept(rule, e.p, m, steps, e.stage);
  for (int i = 0; i + 1 < kept; ++i) run->stashes.push_back(device_alloc<Element>(layout.size));
  run->stash_version.assign(run->stashes.size(), -1);
  run->gradients = {gradients};
  for (int i = 1; i < pipedream_gradients_kept(rule, e.p, m, steps, e.stage); ++i) {
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
    run.updates->bring_tied_embedding_to(tied_version(run.rule, e.p, action.microbatch), e.stream);
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
  const int updates = run.m * run.steps / run.rule.update_every;
  if (run.step + 1 == run.steps)
    for (int v = 1; v <= updates; ++v)
      if (pipedream_decided_at_end(run.rule, e.p, run.m, run.steps, v))
        run.updates->decide(v, gradients_of_update(run, v), e.stream);
  apply_updates_before(e, run.step_end[size_t(run.step)]);
  run.step += 1;
  if (run.step == run.steps && run.tied_copy)
    run.updates->bring_tied_embedding_to(run.m * run.steps / run.rule.update_every, e.stream);
}

#define INSTANTIATE_PIPEDREAM_WALK(Element)                                                                          \
  template void enable_pipedream<Element>(Executor<Element>&, const PipeDreamRule&, int, int, const ParameterLayout&, \
                                          Element*, Element*, std::shared_ptr<PipeDreamUpdates<Element>>);           \
  template void destroy_pipedream<Element>(Executor<Element>&);                                                      \
  template void begin_pipedream_step<Element>(Executor<Element>&);                                                   \
  template void after_pipedream_transfer<Element>(Executor<Element>&, const Step&);                                 \
  template std::vector<ParameterTensors<Element>> pipedream_views<Element>(                                          \
      Executor<Element>&, const Action&, const std::vector<ParameterTensors<Element>>&);                             \
  template std::vector<ParameterTensors<Element>> pipedream_gradient_views<Element>(                                 \
      Executor<Element>&, const Action&, const std::vector<ParameterTensors<Element>>&);                             \
  template Element* pipedream_head_share<Element>(Executor<Element>&, const Action&, Element*);                                \
  template void after_pipedream_compute<Element>(Executor<Element>&);                                                \
  template void end_pipedream_step<Element>(Executor<Element>&);

INSTANTIATE_PIPEDREAM_WALK(float)
INSTANTIATE_PIPEDREAM_WALK(__nv_bfloat16)
