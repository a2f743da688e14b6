// The measured timeline of a training step (trainer/program/measured_timeline.h).
#include "trainer/program/measured_timeline.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "kernels/cuda_check.cuh"
#include "model/atomic_file.h"
#include "pipeline/simulate.h"
#include "pipeline/timeline.h"

namespace {

// The action text of what an executed step ran: "F3.1", or a group's "sF3+rB1".
std::string executed_name(const ExecutedStep& step) {
  if (step.compute) return to_text(Action{step.kind, step.microbatch, step.chunk});
  Step group;
  for (const ExecutedMessage& m : step.messages) group.push_back({m.kind, m.microbatch, m.chunk});
  return to_text(group);
}

std::string executed_category(const ExecutedStep& step) {
  if (!step.compute) return "transfer";
  return step_category({Action{step.kind, step.microbatch, step.chunk}});
}

// The shortest event drawn (ms): a group that ran wholly behind a compute still shows, and the
// flows bound to it (pipeline/timeline.cpp, 0.01 us inside their events) stay inside it.
constexpr double kShortestEventMs = 2e-5;

// This rank's events, one line each: name, category, start (ms), end (ms), details, tab-separated.
// One track per stage shows its steps in schedule order without overlaps, while a transfer group
// runs on its own stream beside the computes: a compute is drawn as measured (the computes of a
// stage never overlap); a group from the later of its start and the previous step's drawn end to
// the earlier of its end and the next step's start (at least kShortestEventMs), and then says its
// measured times ("measured 1.250-3.500 ms") in its details.
template <typename Element>
std::string own_events(const Trainer<Element>& trainer) {
  const Executor<Element>& e = trainer.executor;
  const ExecutorAccounting& a = e.accounting;
  if (a.step_start_ms.size() != e.trace.size())
    throw std::runtime_error("the traced step has no timeline origin (start_measured_timeline)");
  std::ostringstream text;
  text.precision(17);
  double drawn_end = -1e300;
  for (size_t i = 0; i < e.trace.size(); ++i) {
    const double start = std::max<double>(a.step_start_ms[i], drawn_end);
    double end = std::max<double>(a.step_end_ms[i], start);
    if (!e.trace[i].compute) {
      if (i + 1 < e.trace.size()) end = std::min<double>(end, a.step_start_ms[i + 1]);
      end = std::max(end, start + kShortestEventMs);
    }
    std::string details = to_text(e.trace[i]);
    if (start != a.step_start_ms[i] || end != a.step_end_ms[i]) {
      std::ostringstream measured;
      measured.precision(3);
      measured << std::fixed << " (measured " << a.step_start_ms[i] << "-" << a.step_end_ms[i] << " ms)";
      details += measured.str();
    }
    text << executed_name(e.trace[i]) << '\t' << executed_category(e.trace[i]) << '\t' << start << '\t' << end
         << '\t' << details << '\n';
    drawn_end = end;
  }
  return text.str();
}

}  // namespace

template <typename Element>
void start_measured_timeline(Trainer<Element>& trainer) {
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  wait_for_world(trainer.world);
  mark_timeline_origin(trainer.executor);
}

template <typename Element>
void write_measured_timeline(const Trainer<Element>& trainer, const PipelineSchedule& schedule, const std::string& path,
                             const std::vector<std::pair<std::string, std::string>>& about) {
  const std::vector<std::string> texts = gather_text_to_rank0(trainer.world, own_events(trainer));
  if (trainer.world.rank != 0) return;
  const Mesh& mesh = trainer.groups.mesh;
  Timeline timeline;
  timeline.about = about;
  std::vector<std::vector<size_t>> first_event(mesh.dp, std::vector<size_t>(mesh.pp));
  for (int rank = 0; rank < int(texts.size()); ++rank) {
    const int replica = rank / mesh.pp, stage = rank % mesh.pp;  // comm/mesh.h's world rank
    first_event[replica][stage] = timeline.events.size();
    std::istringstream lines(texts[rank]);
    for (std::string line; std::getline(lines, line);) {
      std::istringstream fields(line);
      std::string name, category, start, end, details;
      std::getline(fields, name, '\t');
      std::getline(fields, category, '\t');
      std::getline(fields, start, '\t');
      std::getline(fields, end, '\t');
      std::getline(fields, details);
      const double start_us = std::stod(start) * 1e3;
      timeline.events.push_back({replica, stage, name, category, start_us, std::stod(end) * 1e3 - start_us, details});
    }
  }
  // The flows follow the schedule's matching of sends and receives, which the executor ran
  // (tests/mpi/trace_check.h checks it does); the costs do not change the matching.
  timeline.flows = timeline_flows(simulate(schedule.stages, {1, 1, 1, 0}, schedule.placement.kind), first_event);
  const std::string json = chrome_trace_json(timeline);
  write_file_atomically(path, {{json.data(), json.size()}});
}

#define INSTANTIATE_TIMELINE(Element)                                                                      \
  template void start_measured_timeline<Element>(Trainer<Element>&);                                       \
  template void write_measured_timeline<Element>(const Trainer<Element>&, const PipelineSchedule&,         \
                                                 const std::string&,                                       \
                                                 const std::vector<std::pair<std::string, std::string>>&);

INSTANTIATE_TIMELINE(float)
INSTANTIATE_TIMELINE(__nv_bfloat16)
