// The layout advisor: enumeration, prediction, table and command line (trainer/program/layout_advisor.h).
#include "trainer/program/layout_advisor.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "pipeline/memory_plan.h"
#include "pipeline/schedule.h"
#include "trainer/checkpoints/save_and_resume.h"
#include "trainer/program/memory_report.h"
#include "trainer/step/trainer.h"

namespace {

// The flags a layout sets, dropped from the user's command line before the layout's are added,
// and the advisor's own, which a run does not take.
const std::set<std::string> kReplacedFlags = {"pp", "dp", "tp", "schedule", "virtual-stages", "microbatches",
                                              "recompute", "dtype", "sequence-parallel", "plan-layouts", "world",
                                              "costs"};

std::string format(const char* pattern, double value) {
  char text[64];
  std::snprintf(text, sizeof(text), pattern, value);
  return text;
}

// The value of "key": "value" in the trace's otherData, or "" when absent.
std::string about_value(const std::string& json, const std::string& key) {
  const std::string quoted = "\"" + key + "\": \"";
  const size_t at = json.rfind(quoted);
  if (at == std::string::npos) return "";
  const size_t begin = at + quoted.size(), end = json.find('"', begin);
  return end == std::string::npos ? "" : json.substr(begin, end - begin);
}

// The text after "key": in one event's line (a string's contents without its quotes, or a number).
std::string field(const std::string& line, const std::string& key) {
  const std::string quoted = "\"" + key + "\": ";
  const size_t at = line.find(quoted);
  if (at == std::string::npos) return "";
  size_t begin = at + quoted.size();
  if (begin < line.size() && line[begin] == '"') return line.substr(begin + 1, line.find('"', begin + 1) - begin - 1);
  return line.substr(begin, line.find_first_of(",}", begin) - begin);
}

double number_of(const std::string& text, const std::string& what) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used == 0 || used != text.size() || !std::isfinite(value) || value < 0)
    throw std::runtime_error("its " + what + " '" + text + "' is not a non-negative number");
  return value;
}

// The time of a rank's tp all-reduces of `bytes` in `calls` calls: each a latency, and a ring's
// 2 (tp - 1) / tp of its bytes sent.
double all_reduce_time(double calls, double bytes, int tp, const CostRates& rates) {
  return calls * rates.latency + 2.0 * (tp - 1) / tp * bytes * rates.tp_byte;
}

// The stages' costs for the simulator, which takes one cost per kind for every chunk: each stage's
// chunks' FLOPs (on a tp rank) and tp all-reduces summed, over its v chunks, of the heaviest stage
// (the one the others wait for; uneven chunks, the embedding's and the head's, are averaged within
// their stage).
StepCosts layout_costs(const GPTConfig& config, int B, int T, const std::vector<LayerRange>& virtual_stages,
                       const Placement& placement, bool recompute, int tp, bool sequence_parallel,
                       int element_bytes, const CostRates& rates) {
  StepCosts costs{0, 0, 0, rates.latency};
  for (int stage = 0; stage < placement.p; ++stage) {
    double forward = 0, backward_input = 0, backward_weight = 0;
    for (const LayerRange& chunk : chunks_of_stage(virtual_stages, placement, stage)) {
      const ChunkFlops flops = chunk_flops(config, B, T, chunk, recompute, tp);
      const ChunkAllReduces sums =
          sequence_parallel ? chunk_sequence_parallel_collectives(config, B, T, chunk, recompute, tp, element_bytes)
                            : chunk_all_reduces(config, B, T, chunk, recompute, tp, element_bytes);
      forward += rates.forward * flops.forward + all_reduce_time(sums.forward_calls, sums.forward_bytes, tp, rates);
      backward_input += rates.backward_input * flops.backward_input +
                        all_reduce_time(sums.input_calls, sums.input_bytes, tp, rates);
      backward_weight += rates.backward_weight * flops.backward_weight;
    }
    costs.forward = std::max(costs.forward, forward / placement.v);
    costs.backward_input = std::max(costs.backward_input, backward_input / placement.v);
    costs.backward_weight = std::max(costs.backward_weight, backward_weight / placement.v);
  }
  return costs;
}

// The layout's prediction and plan, or false when the trainer would refuse it.
bool predict(const TrainOptions& options, int world, const GPTConfig& config, const CostRates& rates,
             RankedLayout& layout) {
  try {
    const PlannedRun run = planned_run(options, world, config);
    // The schedule and layer split the plan holds are the ones the trainer would run.
    const MemoryPlanInput input = run_memory_input(run);
    const PipelineSchedule& schedule = input.schedule;
    const StepCosts costs = layout_costs(run.config, run.B, run.T, input.virtual_stages, schedule.placement,
                                         options.recompute, run.mesh.tp, options.sequence_parallel,
                                         options.dtype == "bf16" ? 2 : 4, rates);
    const Simulation simulation = simulate(schedule.stages, costs, schedule.placement.kind);
    if (!simulation.deadlock.empty()) return false;
    const std::vector<StageMemoryPlan> plans = plan_memory(input);
    double idle = 0;
    for (const StageSimulation& stage : simulation.stages) idle += stage.idle_share;
    layout = {options, run.mesh.pp, run.mesh.dp, run.mesh.tp, schedule.placement.v, simulation.makespan,
              idle / simulation.stages.size(), plans[heaviest_stage(plans)].peak_bytes, false};
    return true;
  } catch (const std::runtime_error&) {
    return false;  // a layout the trainer refuses (more stages than layers, too few microbatches)
  }
}

// Shell quoting of one argument where it needs it.
std::string shell_word(const std::string& word) {
  if (!word.empty() && word.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_=./,:+*") ==
                           std::string::npos)
    return word;
  std::string quoted = "'";
  for (char c : word) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return quoted + "'";
}

}  // namespace

CostRates flop_cost_rates() { return {1e-9, 1e-9, 1e-9, 0.0, "Gflop", kFlopsPerAllReduceByte * 1e-9}; }

ChunkFlops chunk_flops(const GPTConfig& config, int B, int T, const LayerRange& chunk, bool recompute, int tp) {
  const double tokens = double(B) * T, C = config.channels, blocks = chunk.end_layer - chunk.first_layer;
  const double matmuls = 24 * tokens * C * C / tp, attention = 4 * tokens * T * C / tp;
  const double head = chunk.has_head ? 2 * tokens * C * config.padded_vocab_size / tp : 0;
  ChunkFlops flops;
  flops.forward = blocks * (matmuls + attention) + head;
  flops.backward_input = blocks * (matmuls + 2 * attention) + head + (recompute ? flops.forward : 0);
  flops.backward_weight = blocks * matmuls + head;
  return flops;
}

ChunkAllReduces chunk_all_reduces(const GPTConfig& config, int B, int T, const LayerRange& chunk, bool recompute,
                                  int tp, int element_bytes) {
  if (tp == 1) return {0, 0, 0, 0};
  const double tokens = double(B) * T, btc = tokens * config.channels * element_bytes;
  const double blocks = chunk.end_layer - chunk.first_layer, embedding = chunk.has_embedding ? 1 : 0;
  const double head = chunk.has_head ? 1 : 0;
  ChunkAllReduces sums;
  sums.forward_calls = 2 * blocks + embedding + 2 * head;
  sums.forward_bytes = (2 * blocks + embedding) * btc + head * 3 * tokens * sizeof(float);
  sums.input_calls = 2 * blocks + head + (recompute ? sums.forward_calls : 0);
  sums.input_bytes = (2 * blocks + head) * btc + (recompute ? sums.forward_bytes : 0);
  return sums;
}

ChunkAllReduces chunk_sequence_parallel_collectives(const GPTConfig& config, int B, int T, const LayerRange& chunk,
                                                    bool recompute, int tp, int element_bytes) {
  const double tokens = double(B) * T, C = config.channels, half = tokens * C * element_bytes / 2;
  const double blocks = chunk.end_layer - chunk.first_layer, embedding = chunk.has_embedding ? 1 : 0;
  const double head = chunk.has_head ? 1 : 0;
  ChunkAllReduces sums;
  sums.forward_calls = 4 * blocks + embedding + 3 * head;
  sums.forward_bytes = (4 * blocks + embedding + head) * half + head * 3 * tokens * sizeof(float);
  sums.input_calls = 7 * blocks + 3 * head + embedding + (recompute ? sums.forward_calls : 0);
  sums.input_bytes = (6 * blocks + 2 * head + embedding) * half + (4 * blocks + 2 * head) * C * element_bytes +
                     (recompute ? sums.forward_bytes : 0);
  return sums;
}

CostRates measured_cost_rates(const std::string& trace_json, const GPTConfig& config, int B, int T) {
  if (trace_json.find("\"traceEvents\"") == std::string::npos)
    throw std::runtime_error("it is not a --trace file (no \"traceEvents\")");
  const std::string microbatches_text = about_value(trace_json, "microbatches");
  const double microbatches = number_of(microbatches_text, "\"microbatches\"");
  if (microbatches < 1) throw std::runtime_error("its \"microbatches\" is below 1");
  const bool recompute = about_value(trace_json, "recompute") == "on";
  std::map<std::string, double> sum_ms;  // by category
  std::set<std::string> replicas;
  double shortest_transfer_ms = -1;
  size_t begin = 0;
  for (size_t end; begin < trace_json.size(); begin = end + 1) {
    end = trace_json.find('\n', begin);
    if (end == std::string::npos) end = trace_json.size();
    const std::string line = trace_json.substr(begin, end - begin);
    if (field(line, "ph") != "X") continue;
    const std::string category = field(line, "cat");
    double ms = number_of(field(line, "dur"), "\"dur\"") * 1e-3;
    replicas.insert(field(line, "pid"));
    if (category != "transfer") {
      sum_ms[category] += ms;
      continue;
    }
    // A transfer drawn elsewhere than it ran keeps its measured times in its details.
    const std::string used = field(line, "used");
    const size_t measured = used.find("(measured ");
    if (measured != std::string::npos) {
      const size_t dash = used.find('-', measured), unit = used.find(" ms)", measured);
      ms = number_of(used.substr(dash + 1, unit - dash - 1), "measured end") -
           number_of(used.substr(measured + 10, dash - measured - 10), "measured start");
    }
    if (shortest_transfer_ms < 0 || ms < shortest_transfer_ms) shortest_transfer_ms = ms;
  }
  if (sum_ms["forward"] <= 0) throw std::runtime_error("it holds no forward of a measured step");
  // Every replica runs every microbatch through the whole model: F, and B or both I and W.
  const ChunkFlops whole = chunk_flops(config, B, T, whole_model(config), recompute);
  const double runs = replicas.size() * microbatches;
  CostRates rates{sum_ms["forward"] / (runs * whole.forward), 0, 0, std::max(shortest_transfer_ms, 0.0), "ms", 0};
  rates.tp_byte = kFlopsPerAllReduceByte * rates.forward;
  if (sum_ms["backward"] > 0) {
    rates.backward_input = rates.backward_weight =
        sum_ms["backward"] / (runs * (whole.backward_input + whole.backward_weight));
  } else if (sum_ms["input gradient"] > 0 && sum_ms["weight gradient"] > 0) {
    rates.backward_input = sum_ms["input gradient"] / (runs * whole.backward_input);
    rates.backward_weight = sum_ms["weight gradient"] / (runs * whole.backward_weight);
  } else {
    throw std::runtime_error("it holds no backward (B, or I and W) of a measured step");
  }
  return rates;
}

std::vector<RankedLayout> all_layouts(const TrainOptions& options, int world, const CostRates& rates) {
  const int global_microbatches = options.microbatches * options.dp;
  const GPTConfig config = starting_config(options);  // read once: --init's header for every layout
  const int layers = config.num_layers;
  std::vector<std::string> dtypes = {options.dtype};
  if (options.dtype == "fp32") dtypes.push_back("bf16");
  std::vector<RankedLayout> layouts;
  for (int tp = 1; tp <= world; ++tp) {
    for (int pp = 1; pp * tp <= world; ++pp) {
      const int dp = world / (pp * tp);
      if (world % (pp * tp) != 0 || global_microbatches % dp != 0) continue;
      // A tp rank holds whole heads, hidden columns and vocabulary rows (check_tensor_parallel_sizes).
      if (config.num_heads % tp != 0 || config.padded_vocab_size % tp != 0) continue;
      // (schedule, v): at pp = 1 every schedule runs the same computes, and 1F1B holds the fewest.
      std::vector<std::pair<std::string, int>> schedules = {{"1f1b", 1}};
      if (pp > 1) {
        schedules.push_back({"afab", 1});
        for (int v = 2; pp * v <= layers; ++v) {
          schedules.push_back({"interleaved", v});
          schedules.push_back({"zb-interleaved", v});
        }
        for (const char* name : {"zb-h1", "zb-h2", "zb-v", "v-half", "v-min"})
          schedules.push_back({name, chunks_per_stage(parse_schedule_kind(name), 1)});
      }
      // Sequence parallelism where the trainer takes it (trainer/command_line/sequence_parallel_options.h).
      std::vector<bool> sequence_parallel = {false};
      if (tp > 1 && sequence_length(options, config) % tp == 0)
        sequence_parallel.push_back(true);
      for (const auto& [schedule, v] : schedules)
        for (bool recompute : {false, true})
          for (const std::string& dtype : dtypes)
            for (bool sharded : sequence_parallel) {
              TrainOptions candidate = options;
              candidate.pp = pp, candidate.dp = dp, candidate.tp = tp, candidate.schedule = schedule;
              candidate.virtual_stages = v;
              candidate.microbatches = global_microbatches / dp, candidate.recompute = recompute;
              candidate.dtype = dtype, candidate.sequence_parallel = sharded;
              candidate.plan_layouts = false;
              RankedLayout layout;
              if (!predict(candidate, world, config, rates, layout)) continue;
              layout.bf16_instead_of_fp32 = dtype != options.dtype;
              layouts.push_back(layout);
            }
    }
  }
  // Equal steps and bubbles (to rounding) go to the user's arithmetic (the costs do not know bf16's
  // speed), then to the smaller plan, then to the earlier enumerated (1F1B before AFAB).
  const auto same = [](double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)); };
  std::stable_sort(layouts.begin(), layouts.end(), [&](const RankedLayout& a, const RankedLayout& b) {
    if (!same(a.step, b.step)) return a.step < b.step;
    if (!same(a.bubble, b.bubble)) return a.bubble < b.bubble;
    if (a.bf16_instead_of_fp32 != b.bf16_instead_of_fp32) return b.bf16_instead_of_fp32;
    return a.peak < b.peak;
  });
  return layouts;
}

std::vector<RankedLayout> layouts_that_fit(const std::vector<RankedLayout>& layouts, int world, uint64_t limit) {
  std::vector<RankedLayout> fit;
  for (const RankedLayout& layout : layouts)
    if (layout.peak <= limit) fit.push_back(layout);
  if (!fit.empty()) return fit;
  if (layouts.empty()) throw std::runtime_error("no layout of " + std::to_string(world) + " ranks runs this model");
  const std::string command_prefix = "mpirun -np " + std::to_string(world) + " ./train ";
  const RankedLayout& smallest = *std::min_element(
      layouts.begin(), layouts.end(), [](const RankedLayout& a, const RankedLayout& b) { return a.peak < b.peak; });
  throw std::runtime_error("no layout of " + std::to_string(world) + " ranks fits in " + format_bytes(limit) +
                           ": the smallest plan (" + layout_command(smallest, {}, world).substr(command_prefix.size()) + ") needs " +
                           format_bytes(smallest.peak) + " on its heaviest stage");
}

std::string layout_command(const RankedLayout& layout, const std::vector<std::string>& arguments, int world) {
  std::string command = "mpirun -np " + std::to_string(world) + " ./train";
  for (size_t i = 0; i < arguments.size(); ++i) {
    const std::string& argument = arguments[i];
    const size_t equals = argument.find('=');
    const std::string name = argument.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const bool separate_value = equals == std::string::npos && option_takes_value(name) && i + 1 < arguments.size();
    if (!kReplacedFlags.count(name)) {
      command += " " + shell_word(argument);
      if (separate_value) command += " " + shell_word(arguments[i + 1]);
    }
    if (separate_value) ++i;
  }
  const TrainOptions& o = layout.options;
  command += " --pp " + std::to_string(layout.pp) + " --dp " + std::to_string(layout.dp);
  if (layout.tp > 1) command += " --tp " + std::to_string(layout.tp);
  command += " --schedule " + o.schedule;
  if (o.schedule == "interleaved") command += " --virtual-stages " + std::to_string(o.virtual_stages);
  command += " --microbatches " + std::to_string(o.microbatches);
  if (o.recompute) command += " --recompute";
  if (o.dtype != "fp32") command += " --dtype " + o.dtype;
  if (o.sequence_parallel) command += " --sequence-parallel";
  return command;
}

std::string layouts_report(const std::vector<RankedLayout>& layouts, const std::vector<std::string>& arguments,
                           int world, uint64_t limit, const CostRates& rates, size_t rows) {
  const TrainOptions& first = layouts.front().options;
  std::string text = "layouts of " + std::to_string(world) + " ranks for L=" + std::to_string(first.layers) +
                     " C=" + std::to_string(first.dim) + ", " + std::to_string(first.microbatches * layouts.front().dp) +
                     " microbatches of B=" + std::to_string(first.batch) + " per step, that fit " +
                     format_bytes(limit) + " (" + std::to_string(layouts.size()) + "; best first, at most " +
                     std::to_string(rows) + " shown)\n";
  text += "costs: " + std::string(rates.unit == "ms" ? "measured (--costs), ms" : "FLOPs, 1 per Gflop") +
          "; a tp all-reduce's byte as " + format("%.0f", kFlopsPerAllReduceByte) +
          " FLOPs; the step leaves out the dp all-reduce and the optimizer\n\n";
  char line[200];
  std::snprintf(line, sizeof(line), "%-12s %-12s %2s %4s %-9s %-6s %-3s %12s %7s %12s\n", "schedule", "pp x dp x tp",
                "v", "m", "recompute", "dtype", "sp", ("step " + rates.unit).c_str(), "bubble", "peak");
  text += line;
  bool any_bf16 = false;
  for (size_t i = 0; i < layouts.size() && i < rows; ++i) {
    const RankedLayout& l = layouts[i];
    const bool changes_arithmetic = l.bf16_instead_of_fp32;
    any_bf16 = any_bf16 || changes_arithmetic;
    std::snprintf(line, sizeof(line), "%-12s %-12s %2d %4d %-9s %-6s %-3s %12s %7.3f %12s\n",
                  l.options.schedule.c_str(),
                  (std::to_string(l.pp) + " x " + std::to_string(l.dp) + " x " + std::to_string(l.tp)).c_str(), l.v,
                  l.options.microbatches, l.options.recompute ? "on" : "off",
                  (l.options.dtype + (changes_arithmetic ? "*" : "")).c_str(), l.options.sequence_parallel ? "on" : "off",
                  format("%.4g", l.step).c_str(), l.bubble, format_bytes(l.peak).c_str());
    text += line;
  }
  if (any_bf16)
    text += "* bf16 changes the arithmetic (bf16 parameters, activations and messages: not fp32's losses); "
            "its costs here are fp32's\n";
  return text + "\nthe best:\n" + layout_command(layouts.front(), arguments, world) + "\n";
}

std::string plan_layouts(const TrainOptions& options, const std::vector<std::string>& arguments, int world_size) {
  const int world = options.world > 0 ? options.world : world_size;
  const uint64_t limit = options.memory_limit > 0 ? options.memory_limit : usable_device_bytes(options);
  CostRates rates = flop_cost_rates();
  if (!options.costs.empty()) {
    std::ifstream file(options.costs, std::ios::binary);
    if (!file) throw std::runtime_error("--costs " + options.costs + ": cannot be read");
    std::ostringstream text;
    text << file.rdbuf();
    const GPTConfig config = starting_config(options);
    try {
      rates = measured_cost_rates(text.str(), config, options.batch, sequence_length(options, config));
    } catch (const std::runtime_error& error) {
      throw std::runtime_error("--costs " + options.costs + ": " + error.what() +
                               " (expected the JSON of a ./train --trace run of this model)");
    }
  }
  const std::vector<RankedLayout> fit = layouts_that_fit(all_layouts(options, world, rates), world, limit);
  return layouts_report(fit, arguments, world, limit, rates);
}
