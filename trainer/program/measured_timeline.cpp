// The measured timeline of a training step (trainer/program/measured_timeline.h).
#include "trainer/program/measured_timeline.h"

#include <algorithm>
#include <cstdio>
#include <sstream>
#include <stdexcept>

#include "kernels/cuda_check.cuh"
#include "model/atomic_file.h"
#include "pipeline/simulate.h"
#include "pipeline/timeline.h"

namespace {

// The action text of what an executed step ran: "F3.1", a pair's backward run on the second
// compute stream "&B3" (as the schedule names it), or a group's "sF3+rB1".
std::string executed_name(const ExecutedStep& step) {
  if (step.compute) return to_text(Action{step.kind, step.microbatch, step.chunk, step.stream == 1});
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

// This rank's steps as measured, one line each: name, category, start (ms), end (ms), the compute
// stream (TimelineEvent::stream: 1 for an overlapped pair's backward), details, tab-separated, after a first line "barrier\t<ms>": how long before its origin this rank entered
// the barrier.
template <typename Element>
std::string own_events(const Trainer<Element>& trainer, const TimelineStart& start) {
  const Executor<Element>& e = trainer.executor;
  const ExecutorAccounting& a = e.accounting;
  if (a.step_start_ms.size() != e.trace.size() || start.barrier_ms < 0)
    throw std::runtime_error("the traced step has no timeline origin (start_measured_timeline)");
  std::ostringstream text;
  text.precision(17);
  text << "barrier\t" << start.barrier_ms << '\n';
  for (size_t i = 0; i < e.trace.size(); ++i)
    text << executed_name(e.trace[i]) << '\t' << executed_category(e.trace[i]) << '\t' << a.step_start_ms[i] << '\t'
         << a.step_end_ms[i] << '\t' << e.trace[i].stream << '\t' << to_text(e.trace[i]) << '\n';
  return text.str();
}

// The ranks' origins are their exits from one barrier, which on a loaded node (more ranks than
// cores) are not one instant: a rank waiting for a core leaves it late, its origin late and its
// times early, by up to 50 ms measured with 4 ranks on 2 cores (its receives then ended before
// their sends started). What bounds the error: the barrier ended after every rank entered it, so
// rank k's origin is at most barrier_ms[k] after that instant. The correction: each rank's times
// move later by the least delay[k] >= 0 (at most barrier_ms[k]) that puts every message's measured
// arrival (its receive's end) at or after its posting (its send's start; both as set_flow_ends
// places them, which then sets the flows' ends from the corrected times): the least solution of
// difference constraints, by relaxation as in Bellman-Ford. Returns the text for the file, "rank 0
// +0.000 of 0.512 ms, ...", or says it found none within the bounds (the times then stay as
// measured, and the messages show the contradiction).
std::string align_clocks(Timeline& timeline, const std::vector<int>& rank_of_event, const std::vector<double>& barrier_ms) {
  set_flow_ends(timeline);
  std::vector<double> delay_us(barrier_ms.size(), 0.0);
  bool changed = true;
  for (size_t round = 0; changed && round <= delay_us.size(); ++round) {
    changed = false;
    for (const TimelineFlow& f : timeline.flows) {
      const int sender = rank_of_event[f.send_event], receiver = rank_of_event[f.recv_event];
      const double needed = f.posted_us + delay_us[sender] - f.arrived_us;
      if (needed > delay_us[receiver]) delay_us[receiver] = needed, changed = true;
    }
  }
  std::ostringstream text;
  text.precision(3);
  text << std::fixed;
  bool within = !changed;
  for (size_t k = 0; k < delay_us.size(); ++k) {
    within = within && delay_us[k] <= barrier_ms[k] * 1e3;
    text << (k ? ", " : "") << "rank " << k << " +" << delay_us[k] * 1e-3 << " of " << barrier_ms[k] << " ms";
  }
  if (!within) return "none within the barrier's bounds (times as measured): needed " + text.str();
  for (size_t i = 0; i < timeline.events.size(); ++i) timeline.events[i].start_us += delay_us[rank_of_event[i]];
  set_flow_ends(timeline);
  return text.str();
}

// Draws one stage's first track (its events [first, end), in schedule order) without overlaps,
// while a transfer group runs on its own stream beside the computes: a compute as measured (the
// computes on a stage's first stream never overlap; an overlapped pair's backward ran on the
// second compute stream, and is drawn as measured on the stage's second track, not here), a group
// between the previous step's drawn end and the next step's measured start (at least
// kShortestEventMs), its details then saying its measured times ("measured 1.250-3.500 ms", after the clock correction). The flows
// keep their measured ends: an arrow starts when its send was posted, during whatever the track
// then drew, not at a group drawn later than it ran.
void draw_track(std::vector<TimelineEvent>& events, size_t first, size_t end) {
  double drawn_end_us = -1e300;
  for (size_t i = first; i < end; ++i) {
    TimelineEvent& e = events[i];
    if (e.stream != 0) continue;
    const double start_us = e.start_us, end_us = e.start_us + e.duration_us;
    if (e.category == "transfer") {
      const double next_start_us = i + 1 < end ? events[i + 1].start_us : 1e300;
      e.start_us = std::min(std::max(start_us, drawn_end_us), next_start_us - kShortestEventMs * 1e3);
      e.duration_us = std::max(std::min(end_us, next_start_us), e.start_us + kShortestEventMs * 1e3) - e.start_us;
      if (e.start_us != start_us || e.duration_us != end_us - start_us) {
        std::ostringstream measured;
        measured.precision(3);
        measured << std::fixed << " (measured " << start_us * 1e-3 << "-" << end_us * 1e-3 << " ms)";
        e.details += measured.str();
      }
    }
    drawn_end_us = e.start_us + e.duration_us;
  }
}

}  // namespace

template <typename Element>
TimelineStart start_measured_timeline(Trainer<Element>& trainer) {
  CUDA_CHECK(cudaStreamSynchronize(trainer.stream));
  cudaEvent_t barrier_entry;
  CUDA_CHECK(cudaEventCreate(&barrier_entry));
  CUDA_CHECK(cudaEventRecord(barrier_entry, trainer.stream));
  CUDA_CHECK(cudaEventSynchronize(barrier_entry));  // stamped before this rank enters the barrier
  wait_for_world(trainer.world);
  mark_timeline_origin(trainer.executor);
  // The stream is idle: the origin is recorded at once, and the wait costs the step nothing.
  CUDA_CHECK(cudaEventSynchronize(trainer.executor.origin));
  float barrier_ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&barrier_ms, barrier_entry, trainer.executor.origin));
  CUDA_CHECK(cudaEventDestroy(barrier_entry));
  return {barrier_ms};
}

template <typename Element>
void write_measured_timeline(const Trainer<Element>& trainer, const TimelineStart& start, const PipelineSchedule& schedule,
                             const std::string& path, const std::vector<std::pair<std::string, std::string>>& about,
                             double loss, const std::vector<size_t>& step_begin) {
  const std::vector<std::string> texts = gather_text_to_rank0(trainer.world, own_events(trainer, start));
  if (trainer.world.rank != 0) return;
  const Mesh& mesh = trainer.groups.mesh;
  Timeline timeline;
  timeline.about = about;
  char loss_text[32];
  std::snprintf(loss_text, sizeof(loss_text), "%.17g", loss);
  timeline.about.push_back({"loss", loss_text});
  // Each replica's tp rank t runs its own pipeline (its stages' tp rank t): row replica tp + t.
  std::vector<std::vector<size_t>> first_event(size_t(mesh.dp) * mesh.tp, std::vector<size_t>(mesh.pp));
  std::vector<size_t> first_of_rank;
  std::vector<int> rank_of_event;
  std::vector<double> barrier_ms(texts.size());
  for (int rank = 0; rank < int(texts.size()); ++rank) {
    // comm/mesh.h's world rank: (replica pp + stage) tp + tp_rank.
    const int replica = rank / (mesh.pp * mesh.tp), stage = rank / mesh.tp % mesh.pp, tp_rank = rank % mesh.tp;
    first_event[size_t(replica) * mesh.tp + tp_rank][stage] = timeline.events.size();
    first_of_rank.push_back(timeline.events.size());
    std::istringstream lines(texts[rank]);
    std::string line;
    std::getline(lines, line);  // "barrier\t<ms>"
    barrier_ms[rank] = std::stod(line.substr(line.find('\t') + 1));
    while (std::getline(lines, line)) {
      std::istringstream fields(line);
      std::string name, category, start, end, stream, details;
      std::getline(fields, name, '\t');
      std::getline(fields, category, '\t');
      std::getline(fields, start, '\t');
      std::getline(fields, end, '\t');
      std::getline(fields, stream, '\t');
      std::getline(fields, details);
      const double start_us = std::stod(start) * 1e3;
      timeline.events.push_back({replica, stage, name, category, start_us, std::stod(end) * 1e3 - start_us, details,
                                 std::stoi(stream), tp_rank});
      rank_of_event.push_back(rank);
    }
  }
  // The flows follow the schedule's matching of sends and receives, which the executor ran
  // (tests/mpi/trace_check.h checks it does); the costs do not change the matching.
  Simulation simulation = simulate(schedule.stages, {1, 1, 1, 0}, schedule.placement.kind);
  if (!step_begin.empty()) {  // the traced step's messages (a send and its receive share a step), at its indices
    std::vector<MessageLink> messages;
    for (MessageLink link : simulation.messages)
      if (size_t(link.send_step) >= step_begin[link.send_stage]) {
        link.send_step -= int(step_begin[link.send_stage]);
        link.recv_step -= int(step_begin[link.recv_stage]);
        messages.push_back(link);
      }
    simulation.messages = messages;
  }
  timeline.flows = timeline_flows(simulation, first_event);
  timeline.about.push_back({"clock corrections", align_clocks(timeline, rank_of_event, barrier_ms)});
  for (size_t rank = 0; rank < texts.size(); ++rank)
    draw_track(timeline.events, first_of_rank[rank],
               rank + 1 < texts.size() ? first_of_rank[rank + 1] : timeline.events.size());
  const std::string json = chrome_trace_json(timeline);
  write_file_atomically(path, {{json.data(), json.size()}});
}

#define INSTANTIATE_TIMELINE(Element)                                                                      \
  template TimelineStart start_measured_timeline<Element>(Trainer<Element>&);                              \
  template void write_measured_timeline<Element>(const Trainer<Element>&, const TimelineStart&,             \
                                                 const PipelineSchedule&,                                  \
                                                 const std::string&,                                       \
                                                 const std::vector<std::pair<std::string, std::string>>&, double, \
                                                 const std::vector<size_t>&);

INSTANTIATE_TIMELINE(float)
INSTANTIATE_TIMELINE(__nv_bfloat16)
