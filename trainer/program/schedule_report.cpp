// The --print-schedule report and the run's names (trainer/program/schedule_report.h).
#include "trainer/program/schedule_report.h"

#include <cstdio>

#include "pipeline/pytorch_csv.h"
#include "pipeline/simulate.h"
#include "pipeline/timeline.h"
#include "trainer/data/documents.h"

namespace {

bool is_bf16(const RunSetup& setup) { return setup.options.dtype == "bf16"; }

// Bytes of one chunk's activations in the run's element type, on a tp rank.
size_t chunk_activation_bytes(const RunSetup& setup, const LayerRange& range) {
  const GPTConfig& config = setup.start.config;
  const AttentionKind attention = setup.layout.attention;
  const int tp = setup.mesh.tp;
  const bool sp = setup.layout.sequence_parallel;
  return is_bf16(setup) ? activation_bytes<__nv_bfloat16>(config, setup.B, setup.T, range, tp, attention, sp)
                        : activation_bytes<float>(config, setup.B, setup.T, range, tp, attention, sp);
}

// Bytes of one activation slot of a chunk, as the executor allocates it.
size_t slot_bytes(const RunSetup& setup, const LayerRange& range) {
  const GPTConfig& config = setup.start.config;
  const int shards = setup.layout.sequence_parallel ? setup.mesh.tp : 1;
  const size_t input = is_bf16(setup) ? stage_input_bytes<__nv_bfloat16>(config, setup.B, setup.T, range, shards)
                                      : stage_input_bytes<float>(config, setup.B, setup.T, range, shards);
  return input + (setup.layout.recompute ? 0 : chunk_activation_bytes(setup, range));
}

// Bytes of one weight-gradient-input buffer of a chunk (split backwards), on a tp rank.
size_t weight_buffer_bytes(const RunSetup& setup, const LayerRange& range) {
  const GPTConfig& config = setup.start.config;
  const int tp = setup.mesh.tp;
  const bool sp = setup.layout.sequence_parallel;
  return is_bf16(setup) ? weight_gradient_input_bytes<__nv_bfloat16>(config, setup.B, setup.T, range, tp, sp)
                        : weight_gradient_input_bytes<float>(config, setup.B, setup.T, range, tp, sp);
}

// The attention's share of a forward's work at T, from the matrix products' multiply-adds per
// token: a block's linear ones 12 C^2 (qkv 3 C^2, projection C^2, MLP 8 C^2), its materialised
// attention's 2 T C (q k^T and the probabilities times v over the whole T x T), the head's C Vp.
// One share for the whole model: --schedule-costs gives every chunk the same costs.
double attention_share(const GPTConfig& config, int T) {
  const double L = config.num_layers, C = config.channels;
  return L * 2 * T / (L * (12 * C + 2 * T) + config.padded_vocab_size);
}

// --documents: the first step's microbatches of replica 0 (k = 0 .. m-1) at the warm-up's first
// cap, each T from the document starts alone, as train_step reads them.
std::vector<int> first_step_lengths(const RunSetup& setup) {
  const TrainOptions& options = setup.options;
  DocumentReader reader = make_document_reader(setup.data.train, setup.B, setup.T, options.shuffle, options.seed,
                                               length_multiple(setup));
  const SeqLenWarmup warmup =
      make_seq_len_warmup(options.seq_len_warmup > 0 ? options.seq_len_warmup_start : setup.T, setup.T,
                          options.seq_len_warmup, length_multiple(setup));
  std::vector<int> lengths;
  for (int k = 0; k < setup.layout.microbatches; ++k)
    lengths.push_back(int(microbatch_length(reader, k, warmup_seq_len(warmup, 0))));
  return lengths;
}

// --schedule-costs and --pair-cost, for the simulators; with --documents each microbatch's costs
// scaled by its length (pipeline/simulate.h's length_scale).
StepCosts step_costs(const RunSetup& setup) {
  const TrainOptions& options = setup.options;
  const std::vector<double>& c = options.schedule_costs;
  StepCosts costs{c[0], c[1], c[2], c[3], options.pair_cost == "max" ? PairCost::max : PairCost::sum};
  if (options.documents)
    for (int T : first_step_lengths(setup))
      costs.lengths.push_back(length_scale(T, setup.T, attention_share(setup.start.config, setup.T)));
  return costs;
}

std::string format_number(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3g", value);
  return text;
}

// "microbatch lengths ...": the lengths --documents gave the simulators, and how they scale.
std::string lengths_line(const RunSetup& setup) {
  std::string lengths;
  for (int T : first_step_lengths(setup)) lengths += " " + std::to_string(T);
  char line[256];
  std::snprintf(line, sizeof(line), "; F and I scaled by (1 - q) r + q r^2, W by r, r = T / %d, q = %.3f (the "
                "attention's share of a forward at T = %d)\n", setup.T, attention_share(setup.start.config, setup.T),
                setup.T);
  return "microbatch lengths (--documents, the first step of replica 0):" + lengths + line;
}

}  // namespace

std::string schedule_title(const RunSetup& setup) {
  const TrainOptions& options = setup.options;
  if (!options.schedule_file.empty()) return "the schedule of " + options.schedule_file;
  if (options.microbatch_group == 0) return options.schedule + " schedule";
  return options.schedule + " schedule, microbatch group " + std::to_string(options.microbatch_group);
}

std::vector<std::pair<std::string, std::string>> trace_about(const RunSetup& setup, const std::string& what) {
  return {{"what", what}, {"schedule", schedule_title(setup)},
          {"layout", "dp " + std::to_string(setup.mesh.dp) + " x pp " + std::to_string(setup.mesh.pp)},
          {"microbatches", std::to_string(setup.layout.microbatches)}, {"recompute", setup.layout.recompute ? "on" : "off"}};
}

std::string layers_text(const LayerRange& range) {
  std::string text = "layers [" + std::to_string(range.first_layer) + ", " + std::to_string(range.end_layer) + ")";
  if (range.has_embedding) text += " + embedding";
  if (range.has_head) text += " + head";
  return text;
}

std::string schedule_report(const RunSetup& setup) {
  const PipelineLayout& layout = setup.layout;
  const PipelineSchedule schedule = layout_schedule(layout, setup.mesh.pp);
  if (setup.options.schedule_format == "pytorch-csv") return pytorch_csv_text(schedule);
  const int p = schedule.placement.p, v = schedule.placement.v, m = layout.microbatches;
  const StepCosts costs = step_costs(setup);
  const Simulation simulation = simulate(schedule.stages, costs, schedule.placement.kind);
  std::vector<std::vector<Action>> orders;
  for (const StageSchedule& steps : schedule.stages) orders.push_back(compute_actions(steps));
  const Simulation dataflow = simulate_dataflow(orders, costs, schedule.placement.kind);
  char line[512];
  const std::string column =
      costs.lengths.empty() ? "t_f" : format_number(timeline_column(costs) / costs.forward) + " t_f";
  std::snprintf(line, sizeof(line), "timeline (a column per %s; t_f, t_i, t_w = %g, %g, %g, B = I + W, latency %g%s):\n",
                column.c_str(), costs.forward, costs.backward_input, costs.backward_weight, costs.latency,
                !has_overlapped_pairs(schedule) ? "" : costs.pair == PairCost::sum ? "; a pair F&B: F + B" : "; a pair F&B: max(F, B)");
  const std::string mesh = setup.mesh.tp == 1 ? "" : ", dp = " + std::to_string(setup.mesh.dp) + " x tp = " +
                                                      std::to_string(setup.mesh.tp) + " x pp = " + std::to_string(p);
  std::string report = schedule_title(setup) + mesh + ", p = " + std::to_string(p) + ", m = " + std::to_string(m) +
                       ", v = " + std::to_string(v) + (layout.recompute ? ", recompute" : "") +
                       (layout.pipeline_layout.empty() ? "" : ", layout " + layout.pipeline_layout) + "\n" +
                       (setup.options.documents ? lengths_line(setup) : "") + "\n" +
                       schedule_grid_text(schedule) + "\n" + line + format_timeline(schedule.stages, simulation, costs) +
                       "\n";
  std::snprintf(line, sizeof(line), "predicted makespan %.4g t_f\n", simulation.makespan / costs.forward);
  report += line;
  // The other two models, where they differ from one step at a time (pipeline/simulate.h).
  const auto other_model = [&](const char* name, const Simulation& other) {
    if (other.makespan == simulation.makespan) return;
    std::snprintf(line, sizeof(line), "%s (pipeline/simulate.h): makespan %.4g t_f, idle", name,
                  other.makespan / costs.forward);
    report += line;
    for (int s = 0; s < p; ++s) {
      std::snprintf(line, sizeof(line), "%s %.3f", s ? "," : "", other.stages[s].idle_share);
      report += line;
    }
    report += "\n";
  };
  other_model("on the executor's transfer stream", simulate_transfer_stream(schedule.stages, costs, schedule.placement.kind));
  other_model("as a data flow, transfers holding no stream", dataflow);
  // What the executor allocates before step 1: each chunk's pools at that chunk's peaks.
  for (int s = 0; s < p; ++s) {
    const StageSimulation& stage = simulation.stages[s];
    std::string slots, weights, layers;
    double bytes = 0;
    for (int chunk = 0; chunk < v; ++chunk) {
      const LayerRange& range = setup.virtual_stages[schedule.placement.virtual_stage(s, chunk)];
      const size_t slot = slot_bytes(setup, range), weight_buffer = weight_buffer_bytes(setup, range);
      const int held = stage.chunk_peak_in_flight[chunk], pending = stage.chunk_peak_pending[chunk];
      slots += (chunk ? " + " : "peak ") + std::to_string(held) + " in flight x " + std::to_string(slot) + " B";
      if (pending > 0)
        weights += " + " + std::to_string(pending) + " awaiting W x " + std::to_string(weight_buffer) + " B";
      bytes += double(held) * slot + double(pending) * weight_buffer;
      if (layout.recompute) bytes += chunk_activation_bytes(setup, range);
      layers += (chunk ? ", " : "") + layers_text(range);
    }
    std::snprintf(line, sizeof(line), "stage %d: idle %.3f, %s%s%s = %.0f B (%s)\n", s, stage.idle_share,
                  slots.c_str(), weights.c_str(), layout.recompute ? " + working set" : "", bytes, layers.c_str());
    report += line;
  }
  return report;
}

std::string predicted_timeline_json(const RunSetup& setup) {
  const PipelineSchedule schedule = layout_schedule(setup.layout, setup.mesh.pp);
  Timeline timeline = predicted_timeline(schedule, simulate(schedule.stages, step_costs(setup), schedule.placement.kind), 1e3);
  timeline.about = trace_about(setup, "the simulator's predicted timeline; one unit of --schedule-costs = 1 ms");
  return chrome_trace_json(timeline);
}
