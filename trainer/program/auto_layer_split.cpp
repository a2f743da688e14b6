// --layers-per-stage auto: measure, agree, partition (trainer/program/auto_layer_split.h).
#include "trainer/program/auto_layer_split.h"

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "comm/host_exchange.h"
#include "pipeline/layer_split.h"
#include "pipeline/simulate.h"
#include "trainer/program/memory_report.h"

namespace {

// Timed calls per layer kind: 5, and one untimed, so 18 forwards and backwards of single layers in
// all, once per run; the head's are most of it (about four steps of an 8-layer model with an
// 8192-token vocabulary on 4 ranks here, docs/pipeline.md).
constexpr int kRepeats = 5;

std::string join(const std::vector<int>& counts) {
  std::string text;
  for (int count : counts) text += (text.empty() ? "" : ",") + std::to_string(count);
  return text;
}

LayerCosts forward_costs(const MeasuredLayerCosts& m, int layers) {
  return {std::vector<double>(layers, m.block_forward), m.embedding_forward, m.head_forward};
}

// A microbatch's share of the updates: each kind's AdamW times the updates per microbatch.
LayerCosts update_costs(const MeasuredLayerCosts& m, int layers, double updates_per_microbatch) {
  const double u = updates_per_microbatch;
  return {std::vector<double>(layers, u * m.block_update), u * m.embedding_update, u * m.head_update};
}

LayerCosts backward_costs(const MeasuredLayerCosts& m, int layers, bool recompute) {
  const double again = recompute ? 1 : 0;
  return {std::vector<double>(layers, m.block_backward + again * m.block_forward),
          m.embedding_backward + again * m.embedding_forward, m.head_backward + again * m.head_forward};
}

// The mean over the world of each rank's figures (integers: the sum is exact in any order).
MeasuredLayerCosts mean_over_world(const MeasuredLayerCosts& mine, const World& world) {
  double values[] = {mine.block_forward, mine.block_backward, mine.embedding_forward, mine.embedding_backward,
                     mine.head_forward,  mine.head_backward,  mine.block_update,      mine.embedding_update,
                     mine.head_update};
  if (world.size > 1) sum_over_world(world, values, 9);
  for (double& value : values) value /= world.size;
  return {values[0], values[1], values[2], values[3], values[4], values[5], values[6], values[7], values[8]};
}

// Every rank's usable device bytes on every rank (as check_memory_fits gathers them).
std::vector<double> usable_bytes_of_ranks(const TrainOptions& options, const World& world) {
  std::vector<double> limits(world.size, 0.0);
  limits[world.rank] = double(usable_device_bytes(options));
  if (world.size > 1) sum_over_world(world, limits.data(), limits.size());
  return limits;
}

// The stages whose plan under counts exceeds one of their ranks' usable bytes.
std::vector<int> stages_over_memory(const RunSetup& setup, const std::vector<int>& counts,
                                    const std::vector<double>& limits) {
  PipelineLayout layout = setup.layout;
  layout.layers_per_stage = counts;
  const std::vector<StageMemoryPlan> plans =
      plan_run_memory({setup.options, setup.start.config, setup.B, setup.T, setup.mesh, layout});
  std::vector<int> over;
  for (int rank = 0; rank < int(limits.size()); ++rank) {
    const int stage = rank / setup.mesh.tp % setup.mesh.pp;  // comm/mesh.h's pp_rank
    if (double(plans[stage].peak_bytes) > limits[rank] && std::find(over.begin(), over.end(), stage) == over.end())
      over.push_back(stage);
  }
  return over;
}

}  // namespace

LayerCosts layer_costs(const MeasuredLayerCosts& measured, int layers, bool recompute, double updates_per_microbatch) {
  const LayerCosts forward = forward_costs(measured, layers), backward = backward_costs(measured, layers, recompute);
  const LayerCosts update = update_costs(measured, layers, updates_per_microbatch);
  LayerCosts costs{{}, forward.embedding + backward.embedding + update.embedding,
                   forward.head + backward.head + update.head};
  for (int layer = 0; layer < layers; ++layer)
    costs.blocks.push_back(forward.blocks[layer] + backward.blocks[layer] + update.blocks[layer]);
  return costs;
}

double updates_per_microbatch(const PipelineLayout& layout) {
  return layout.pipedream ? 1.0 / layout.pipedream->rule.update_every : 0.0;
}

double predicted_step_ns(const PipelineLayout& layout, int pp, const MeasuredLayerCosts& measured, int layers,
                         const std::vector<int>& counts) {
  if (layout.pipedream) {  // no flush: m periods of the slowest stage, its share of the updates in each
    const std::vector<double> times =
        chunk_times(layer_costs(measured, layers, layout.recompute, updates_per_microbatch(layout)), counts);
    return layout.microbatches * *std::max_element(times.begin(), times.end());
  }
  const PipelineSchedule schedule = layout_schedule(layout, pp);
  const Placement& placement = schedule.placement;
  const std::vector<double> forwards = chunk_times(forward_costs(measured, layers), counts);
  const std::vector<double> backwards = chunk_times(backward_costs(measured, layers, layout.recompute), counts);
  std::vector<double> stage_forward(placement.p, 0.0), stage_backward(placement.p, 0.0);
  for (int vs = 0; vs < placement.virtual_stages(); ++vs) {
    stage_forward[placement.stage_of(vs)] += forwards[vs];
    stage_backward[placement.stage_of(vs)] += backwards[vs];
  }
  const double forward = *std::max_element(stage_forward.begin(), stage_forward.end()) / placement.v;
  const double backward = *std::max_element(stage_backward.begin(), stage_backward.end()) / placement.v;
  return simulate(schedule.stages, {forward, backward / 2, backward / 2, 0}, placement.kind).makespan;
}

AutoLayerSplit choose_auto_layer_split(const RunSetup& setup) {
  const GPTConfig& config = setup.start.config;
  const TrainOptions& options = setup.options;
  const World world = this_world();
  const bool tf32 = !options.no_tf32;
  const MeasuredLayerCosts mine =
      options.dtype == "bf16" ? probe_layer_costs<__nv_bfloat16>(config, setup.B, setup.T, setup.layout.attention, tf32, kRepeats)
                       : probe_layer_costs<float>(config, setup.B, setup.T, setup.layout.attention, tf32, kRepeats);
  AutoLayerSplit split;
  split.measured = mean_over_world(mine, world);
  split.ranks = world.size;
  split.update_every = setup.layout.pipedream ? setup.layout.pipedream->rule.update_every : 0;
  const int layers = config.num_layers;
  const PipelineSchedule schedule = layout_schedule(setup.layout, setup.mesh.pp);
  const int chunks = schedule.placement.virtual_stages();
  const LayerCosts costs = layer_costs(split.measured, layers, options.recompute, updates_per_microbatch(setup.layout));
  for (const LayerRange& range : split_layers(layers, chunks, 1)) split.even.push_back(range.end_layer - range.first_layer);
  // A split over a rank's memory: each chunk of its stage gets a cap of one layer fewer, and the
  // partitioner runs again; the caps only fall, so this ends, at a split that fits or at none.
  const std::vector<double> limits = usable_bytes_of_ranks(options, world);
  std::vector<int> caps(chunks, layers);
  for (;;) {
    split.counts = partition_layers(costs, chunks, caps);
    const std::vector<int> over = stages_over_memory(setup, split.counts, limits);
    if (over.empty()) break;
    for (int vs = 0; vs < chunks; ++vs)
      if (std::find(over.begin(), over.end(), schedule.placement.stage_of(vs)) != over.end())
        caps[vs] = std::min(caps[vs], split.counts[vs] - 1);
  }
  const auto heaviest = [&](const std::vector<int>& counts) {
    const std::vector<double> times = chunk_times(costs, counts);
    return *std::max_element(times.begin(), times.end());
  };
  split.heaviest_ns = heaviest(split.counts);
  split.even_heaviest_ns = heaviest(split.even);
  split.step_ns = predicted_step_ns(setup.layout, setup.mesh.pp, split.measured, layers, split.counts);
  split.even_step_ns = predicted_step_ns(setup.layout, setup.mesh.pp, split.measured, layers, split.even);
  return split;
}

std::string auto_layer_split_text(const AutoLayerSplit& split) {
  const MeasuredLayerCosts& m = split.measured;
  // PipeDream's stage time holds its share of the updates, its step is the steady one (no flush).
  const std::string updates = split.update_every == 0 ? "" : " (F + B + AdamW / " + std::to_string(split.update_every) + ")";
  const char* step = split.update_every == 0 ? "predicted step" : "predicted steady step";
  char text[768];
  std::snprintf(text, sizeof(text),
                "layers per stage auto: measured F/B per microbatch (mean of %d rank%s): block %.3g/%.3g ms, "
                "embedding %.3g/%.3g ms, head %.3g/%.3g ms; AdamW update block %.3g ms, embedding %.3g ms, head %.3g ms\n"
                "layers per stage auto: %s, heaviest stage%s %.3g ms, %s %.4g ms; even split %s: %.3g ms, "
                "%.4g ms (--layers-per-stage %s reproduces this run)\n",
                split.ranks, split.ranks == 1 ? "" : "s", m.block_forward / 1e6, m.block_backward / 1e6,
                m.embedding_forward / 1e6, m.embedding_backward / 1e6, m.head_forward / 1e6, m.head_backward / 1e6,
                m.block_update / 1e6, m.embedding_update / 1e6, m.head_update / 1e6, join(split.counts).c_str(),
                updates.c_str(), split.heaviest_ns / 1e6, step, split.step_ns / 1e6, join(split.even).c_str(),
                split.even_heaviest_ns / 1e6, split.even_step_ns / 1e6, join(split.counts).c_str());
  return text;
}
