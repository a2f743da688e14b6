// A training step's timeline as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and
// chrome://tracing open: one process per replica, one thread (track) per stage, each schedule step
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
};

// A message: the events of its send and of its receive (indices into Timeline::events).
struct TimelineFlow {
  size_t send_event, recv_event;
  std::string name;  // the send's action, "sF3"
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

// Flows for a timeline whose events are, for each replica r < replicas and stage s, the stage's
// steps in order: first_event[r][s] is the index of the stage's first step's event. The links
// are the simulator's matching of sends and receives (simulation.messages).
std::vector<TimelineFlow> timeline_flows(const Simulation& simulation,
                                         const std::vector<std::vector<size_t>>& first_event);

// The JSON text: {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}.
std::string chrome_trace_json(const Timeline& timeline);
