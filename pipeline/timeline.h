// A training step's timeline as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per replica, one thread (track) per stage (and tp rank, named
// "stage 1, tp rank 0"), each schedule step
// a complete event ("ph": "X") with its start and duration in microseconds, and a flow arrow
// ("ph": "s" then "f", bound to the enclosing events) from the transfer step that sends each
// message to the transfer step that receives it. The same format serves the simulator's predicted
// timeline (predicted_timeline) and the executor's measured one (trainer/program/measured_timeline.h);
// tools/trace_svg.py draws either as an SVG picture.
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "pipeline/schedule.h"
#include "pipeline/simulate.h"

struct TimelineEvent {
  int replica, stage;
  std::string name;       // the step's text: "F3", "I3.1", "sF3+rB1"
  std::string category;   // "forward", "backward", "input gradient", "weight gradient" or "transfer"
  double start_us, duration_us;
  std::string details;    // shown with the event: what the executor used ("slot 1"), or ""
  // 1 for an overlapped pair's second compute (pipeline/action.h), drawn on the stage's second
  // compute track (tid p + stage, after the p stages' tracks), else 0.
  int stream = 0;
  // The stage's tp rank (tensor parallelism): each of a stage's tp ranks has its own track, next
  // to the others (tid (stream p + stage) tp + tp_rank with tp tp ranks).
  int tp_rank = 0;
};

// A message: the events of its send and of its receive (indices into Timeline::events), and where
// its arrow is drawn (us): from when the send was posted to when the data had arrived (flow_ends).
struct TimelineFlow {
  size_t send_event, recv_event;
  std::string name;  // the send's action, "sF3"
  double posted_us = 0, arrived_us = 0;
};

struct Timeline {
  std::vector<TimelineEvent> events;
  std::vector<TimelineFlow> flows;
  std::vector<std::pair<std::string, std::string>> about;  // written as the file's "otherData"
};

// The category of a schedule step ("forward" for F, ..., "transfer" for a group).
std::string step_category(const Step& step);

// The simulator's timeline of one replica of a schedule (simulation: simulate(schedule.stages, ...)),
// one time unit of the simulation = unit_us microseconds.
Timeline predicted_timeline(const PipelineSchedule& schedule, const Simulation& simulation, double unit_us);

// Flows, without their ends (set_flow_ends), for a timeline whose events are, for each replica
// r < replicas and stage s, the stage's steps in order: first_event[r][s] is the index of the
// stage's first step's event. The links are the simulator's matching of sends and receives
// (simulation.messages).
std::vector<TimelineFlow> timeline_flows(const Simulation& simulation,
                                         const std::vector<std::vector<size_t>>& first_event);

// Sets each flow's posted_us just after the start of its send's event and arrived_us just before
// the end of its receive's, both inside those events as they are now. With the tracks' clocks
// aligned, arrived_us >= posted_us: the arrow points forward in time. A measured timeline sets
// them before drawing its transfer groups elsewhere (trainer/program/measured_timeline.cpp).
void set_flow_ends(Timeline& timeline);

// The JSON text: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
std::string chrome_trace_json(const Timeline& timeline);
