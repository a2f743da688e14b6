// A step's timeline as Chrome trace-event JSON (pipeline/timeline.h).
#include "pipeline/timeline.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <tuple>

namespace {

std::string quoted(const std::string& text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\u%04x", c);
      out += escaped;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f", value);
  return text;
}

// A stage's compute track, or with stream 1 its second compute track (after every stage's first),
// of its tp rank tp_rank of tp.
int track_index(int stage, int stream, int stages, int tp_rank, int tp) {
  return (stream * stages + stage) * tp + tp_rank;
}
std::string track(int replica, int stage, int stream, int stages, int tp_rank, int tp) {
  return "\"pid\": " + std::to_string(replica) +
         ", \"tid\": " + std::to_string(track_index(stage, stream, stages, tp_rank, tp));
}

}  // namespace

std::string step_category(const Step& step) {
  if (!is_compute(step)) return "transfer";
  switch (step[0].kind) {
    case ActionKind::forward: return "forward";
    case ActionKind::backward: return "backward";
    case ActionKind::backward_input: return "input gradient";
    default: return "weight gradient";
  }
}

std::vector<TimelineFlow> timeline_flows(const Simulation& simulation,
                                         const std::vector<std::vector<size_t>>& first_event) {
  std::vector<TimelineFlow> flows;
  for (const std::vector<size_t>& replica : first_event)
    for (const MessageLink& link : simulation.messages)
      flows.push_back({replica[link.send_stage] + link.send_step, replica[link.recv_stage] + link.recv_step, link.name});
  return flows;
}

Timeline predicted_timeline(const PipelineSchedule& schedule, const Simulation& simulation, double unit_us) {
  Timeline timeline;
  std::vector<size_t> first(schedule.stages.size());
  for (size_t s = 0; s < schedule.stages.size(); s++) {
    first[s] = timeline.events.size();
    for (size_t i = 0; i < schedule.stages[s].size(); i++) {
      const Step& step = schedule.stages[s][i];
      const double start = simulation.start_time[s][i], end = simulation.end_time[s][i];
      timeline.events.push_back({0, int(s), to_text(step), step_category(step), start * unit_us,
                                 (end - start) * unit_us, "", step.front().overlapped ? 1 : 0});
    }
  }
  timeline.flows = timeline_flows(simulation, {first});
  set_flow_ends(timeline);
  return timeline;
}

void set_flow_ends(Timeline& timeline) {
  for (TimelineFlow& flow : timeline.flows) {
    const TimelineEvent& send = timeline.events[flow.send_event];
    const TimelineEvent& recv = timeline.events[flow.recv_event];
    flow.posted_us = send.start_us + std::min(0.01, send.duration_us / 2);
    flow.arrived_us = recv.start_us + recv.duration_us - std::min(0.01, recv.duration_us / 2);
  }
}

std::string chrome_trace_json(const Timeline& timeline) {
  std::string json = "{\"traceEvents\": [\n";
  std::set<std::tuple<int, int, int, int>> tracks;
  int stages = 0, tp = 1;
  for (const TimelineEvent& e : timeline.events) {
    tracks.insert({e.replica, e.stage, e.stream, e.tp_rank});
    stages = std::max(stages, e.stage + 1);
    tp = std::max(tp, e.tp_rank + 1);
  }
  std::set<int> replicas;
  for (const auto& [replica, stage, stream, tp_rank] : tracks) {
    if (replicas.insert(replica).second)
      json += "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " + std::to_string(replica) +
              ", \"args\": {\"name\": \"replica " + std::to_string(replica) + "\"}},\n";
    const std::string at = track(replica, stage, stream, stages, tp_rank, tp);
    json += "{\"name\": \"thread_name\", \"ph\": \"M\", " + at + ", \"args\": {\"name\": \"stage " +
            std::to_string(stage) + (tp > 1 ? ", tp rank " + std::to_string(tp_rank) : "") +
            (stream ? ", second compute stream" : "") + "\"}},\n";
    json += "{\"name\": \"thread_sort_index\", \"ph\": \"M\", " + at + ", \"args\": {\"sort_index\": " +
            std::to_string(track_index(stage, stream, stages, tp_rank, tp)) + "}},\n";
  }
  for (const TimelineEvent& e : timeline.events) {
    json += "{\"name\": " + quoted(e.name) + ", \"cat\": " + quoted(e.category) + ", \"ph\": \"X\", \"ts\": " +
            number(e.start_us) + ", \"dur\": " + number(e.duration_us) + ", " +
            track(e.replica, e.stage, e.stream, stages, e.tp_rank, tp);
    if (!e.details.empty()) json += ", \"args\": {\"used\": " + quoted(e.details) + "}";
    json += "},\n";
  }
  // Each flow's ends are bound to the events that enclose them ("bp": "e").
  for (size_t k = 0; k < timeline.flows.size(); k++) {
    const TimelineFlow& f = timeline.flows[k];
    const TimelineEvent& send = timeline.events[f.send_event];
    const TimelineEvent& recv = timeline.events[f.recv_event];
    const std::string common = "\"name\": " + quoted(f.name) + ", \"cat\": " + quoted(send.category) +
                               ", \"id\": " + std::to_string(k) + ", \"bp\": \"e\", ";
    json += "{" + common + "\"ph\": \"s\", \"ts\": " + number(f.posted_us) + ", " +
            track(send.replica, send.stage, 0, stages, send.tp_rank, tp) + "},\n";
    json += "{" + common + "\"ph\": \"f\", \"ts\": " + number(f.arrived_us) + ", " +
            track(recv.replica, recv.stage, 0, stages, recv.tp_rank, tp) + "},\n";
  }
  if (json.size() >= 2 && json.compare(json.size() - 2, 2, ",\n") == 0) json.erase(json.size() - 2, 1);
  json += "],\n\"displayTimeUnit\": \"ms\",\n\"otherData\": {";
  for (size_t i = 0; i < timeline.about.size(); i++)
    json += (i ? ", " : "") + quoted(timeline.about[i].first) + ": " + quoted(timeline.about[i].second);
  return json + "}}\n";
}
