// The --print-schedule report of the asynchronous pipeline (trainer/program/pipedream_report.h).
#include "trainer/program/pipedream_report.h"

#include <algorithm>
#include <cstdio>

#include "comm/mesh.h"
#include "model/parameter_layout.h"
#include "pipeline/pipedream.h"
#include "pipeline/pipedream_timeline.h"
#include "pipeline/simulate.h"
#include "trainer/command_line/options.h"
#include "trainer/program/memory_report.h"

namespace {

// The end of each step's last compute on stage s: a step lasts from one to the next.
std::vector<double> step_ends(const std::vector<std::vector<StageSchedule>>& by_step, const Simulation& simulation,
                              int stage) {
  std::vector<double> ends;
  size_t index = 0;
  for (const std::vector<StageSchedule>& step : by_step) {
    index += step[stage].size();
    double end = 0;
    for (size_t i = 0; i < index; i++) end = std::max(end, simulation.end_time[stage][i]);
    ends.push_back(end);
  }
  return ends;
}

// What the report and its timeline show: the rule at the world's p, the first steps, the costs.
struct ShownRun {
  int p, m;
  PipeDreamRule rule;
  int shown;  // the steps shown: at most 3
  StepCosts costs;
};

ShownRun shown_run(const TrainOptions& options, int world_size) {
  const int p = make_mesh(options.dp, options.tp, options.pp, world_size, 0).pp;
  const PipeDreamRule rule{options.update_every, options.weight_stashing == "on", options.vertical_sync};
  check_pipedream(rule, p, options.microbatches, options.steps);
  const std::vector<double>& c = options.schedule_costs;
  return {p, options.microbatches, rule, std::min(options.steps, 3), {c[0], c[1], c[2], c[3]}};
}

}  // namespace

std::string pipedream_report(const TrainOptions& options, int world_size) {
  const auto [p, m, rule, shown, costs] = shown_run(options, world_size);
  char line[512];
  std::snprintf(line, sizeof(line),
                "pipedream schedule, p = %d, m = %d microbatches a step, an update every %d backward%s, weight "
                "stashing %s, vertical sync %s\n\n",
                p, m, rule.update_every, rule.update_every == 1 ? "" : "s", rule.weight_stashing ? "on" : "off",
                rule.vertical_sync ? "on" : "off");
  std::string report = line;
  std::snprintf(line, sizeof(line),
                "the first %d of %d steps (Fk@v: microbatch k's forward with weight version v, Bk@v its backward, "
                "Uv the update that makes version v):\n",
                shown, options.steps);
  report += line + format_pipedream(rule, p, m, shown) + "\n";
  const std::vector<StageSchedule> run = pipedream_run_schedules(p, m, shown);
  const Simulation simulation = simulate(run, costs);
  std::snprintf(line, sizeof(line), "timeline of those steps (a column per t_f; t_f, t_i, t_w = %g, %g, %g, B = I + W, latency %g):\n",
                costs.forward, costs.backward_input, costs.backward_weight, costs.latency);
  report += line + format_timeline(run, simulation, costs) + "\n";
  const Simulation flushed = simulate(make_all_schedules(ScheduleKind::one_f_one_b, p, m, 1), costs);
  const auto by_step = pipedream_step_schedules(p, m, shown);
  // The versions are counted over a run long enough to reach the steady state (pipeline/pipedream.h).
  const int counted_steps = 4 + 4 * p / m;
  // Each stage's parameters, the size of one version: the model and split 1f1b would run (fp32: bf16
  // is refused, trainer/command_line/pipedream_options.h).
  TrainOptions synchronous = options;
  synchronous.schedule = "1f1b";
  const PlannedRun planned = planned_run(synchronous, world_size);
  const std::vector<LayerRange> ranges = check_layout(planned.config, planned.mesh, planned.layout);
  for (int s = 0; s < p; s++) {
    std::string steady;
    if (shown >= 3) {
      const std::vector<double> ends = step_ends(by_step, simulation, s);
      const double busy = m * (costs.forward + costs.backward_input + costs.backward_weight);
      std::snprintf(line, sizeof(line), ", %.3f in step 2", 1 - busy / (ends[1] - ends[0]));
      steady = line;
    }
    const int kept = pipedream_versions_kept(rule, p, m, counted_steps, s);
    const size_t version_bytes = parameter_layout(planned.config, {ranges[s]}).size * sizeof(float);
    const std::string older = kept == 1 ? "" : " (the live weights and " + std::to_string(kept - 1) + " older: " +
                                                   std::to_string(kept - 1) + " x " + std::to_string(version_bytes) +
                                                   " B more than 1f1b's parameters)";
    std::snprintf(line, sizeof(line), "stage %d: idle %.3f over the %d steps%s (1f1b: %.3f a step), weight versions kept %d%s\n",
                  s, simulation.stages[s].idle_share, shown, steady.c_str(), flushed.stages[s].idle_share, kept,
                  older.c_str());
    report += line;
  }
  return report;
}

std::string pipedream_timeline_json(const TrainOptions& options, int world_size) {
  const auto [p, m, rule, shown, costs] = shown_run(options, world_size);
  Timeline timeline = pipedream_predicted_timeline(rule, p, m, shown, costs, 1e3);
  timeline.about = {{"what", "the simulator's predicted timeline of the first " + std::to_string(shown) +
                                 " steps; one unit of --schedule-costs = 1 ms; updates cost 0"},
                    {"schedule", "pipedream schedule"},
                    {"layout", "pp " + std::to_string(p) + ", one replica"},
                    {"microbatches", std::to_string(m)},
                    {"update every", std::to_string(rule.update_every)},
                    {"weight stashing", rule.weight_stashing ? "on" : "off"},
                    {"vertical sync", rule.vertical_sync ? "on" : "off"}};
  return chrome_trace_json(timeline);
}
