// PipeDream's predicted timeline, its updates among its computes (pipeline/pipedream_timeline.h).
#include "pipeline/pipedream_timeline.h"

#include <stdexcept>

Timeline pipedream_predicted_timeline(const PipeDreamRule& rule, int p, int m, int steps, const StepCosts& costs,
                                      double unit_us) {
  const PipelineSchedule schedule{{PlacementKind::ring, p, 1}, pipedream_run_schedules(p, m, steps)};
  const Simulation simulation = simulate(schedule.stages, costs);
  Timeline timeline = predicted_timeline(schedule, simulation, unit_us);
  // The stage's computes are, in order, its actions but the updates: walk both together. Updates are
  // appended after every step's event, so the flows' indices into the events stay valid.
  size_t first = 0;
  for (int s = 0; s < p; s++) {
    size_t event = first;
    double last_end = 0;  // the end of the stage's last compute so far
    for (const std::vector<PipeDreamAction>& step : pipedream_steps(rule, p, m, steps, s))
      for (const PipeDreamAction& action : step) {
        if (action.kind == PipeDreamKind::update) {
          timeline.events.push_back({0, s, to_text(action), "update", last_end, 0, ""});
          continue;
        }
        while (timeline.events[event].category == "transfer") event++;
        TimelineEvent& compute = timeline.events[event++];
        if (compute.name != to_text(action).substr(0, to_text(action).find('@')))
          throw std::logic_error("pipedream timeline: stage " + std::to_string(s) + " runs " + compute.name +
                                 " where its order has " + to_text(action));
        compute.details = "weights v" + std::to_string(action.version);
        last_end = compute.start_us + compute.duration_us;
      }
    first += schedule.stages[s].size();
  }
  return timeline;
}
