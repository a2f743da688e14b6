// The memory plan (pipeline/memory_plan.h): each stage's allocations, item by item, in the order
// create_trainer makes them: parameters, gradients, the executor (pipeline/execute.cu), the
// optimizer (trainer/step/optimizer.cpp), then the communicators' first operations.
#include "pipeline/memory_plan.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "comm/connect.h"
#include "comm/mesh.h"
#include "kernels/adamw.cuh"
#include "kernels/global_norm.cuh"
#include "model/norm_slots.h"
#include "model/optimizer_shards.h"
#include "model/parameter_layout.h"
#include "pipeline/execute.h"

namespace {

uint64_t add(uint64_t a, uint64_t b) {
  uint64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) throw std::runtime_error("memory plan: the byte count overflows 64 bits");
  return sum;
}

uint64_t multiply(uint64_t a, uint64_t b) {
  uint64_t product;
  if (__builtin_mul_overflow(a, b, &product))
    throw std::runtime_error("memory plan: the byte count overflows 64 bits");
  return product;
}

// The model's byte functions (model/gpt.cuh) compute in size_t: before calling them, a bound in
// long double on what they multiply (every activation and scratch tensor of every layer, the
// logits, the attention matrices, 8 bytes an element) must stay below 2^62.
void check_sizes_fit(const MemoryPlanInput& in) {
  const GPTConfig& c = in.config;
  const long double BT = (long double)in.B * in.T;
  const long double per_layer = BT * (64.0L * c.channels + 4.0L * c.num_heads * in.T);
  const long double elements = per_layer * (c.num_layers + 2) + 4.0L * BT * c.padded_vocab_size;
  const long double bytes = 8.0L * elements * (in.microbatches + 4) * in.schedule.placement.v;
  if (!(bytes < std::ldexp(1.0L, 62)))
    throw std::runtime_error("memory plan: --batch " + std::to_string(in.B) + " x --seq-len " + std::to_string(in.T) +
                             " x " + std::to_string(in.microbatches) +
                             " microbatches of this model needs more bytes than 64 bits count");
}

bool has_part(const std::vector<LayerRange>& chunks, bool LayerRange::*part) {
  for (const LayerRange& range : chunks)
    if (range.*part) return true;
  return false;
}

struct PlanBuilder {
  StageMemoryPlan plan{};
  void device(const std::string& name, uint64_t count, uint64_t bytes_each) {
    if (count == 0) return;
    const uint64_t bytes = multiply(count, bytes_each);
    plan.device.push_back({name, count, bytes_each, bytes});
    plan.resident_bytes = add(plan.resident_bytes, bytes);
    plan.allocations = add(plan.allocations, count);
  }
  void pinned(const std::string& name, uint64_t bytes) {
    plan.pinned_host.push_back({name, 1, bytes, bytes});
    plan.pinned_host_bytes = add(plan.pinned_host_bytes, bytes);
  }
};

// The executor's allocations (create_executor), its pools counted by its own plan walk.
template <typename Element>
void plan_executor_memory(const MemoryPlanInput& in, int stage, const std::vector<LayerRange>& chunks,
                          PlanBuilder& b) {
  const Executor<Element> e = plan_executor<Element>(in.config, in.B, in.T, in.schedule.stages[stage], chunks,
                                                     in.schedule.placement, stage, in.recompute, in.attention, in.tp,
                                                     in.sequence_parallel);
  for (size_t c = 0; c < e.chunks.size(); ++c) {
    const ChunkState<Element>& state = e.chunks[c];
    const std::string of_chunk = e.chunks.size() > 1 ? ", chunk " + std::to_string(c) : "";
    const uint64_t activations =
        activation_bytes<Element>(in.config, in.B, in.T, state.range, in.tp, in.attention, in.sequence_parallel);
    b.device("backward scratch" + of_chunk, 1,
             backward_scratch_bytes<Element>(in.config, in.B, in.T, state.range, in.tp, in.attention,
                                             in.sequence_parallel));
    if (in.recompute) b.device("recompute working set" + of_chunk, 1, activations);
    b.device("slot inputs" + of_chunk, state.inputs.buffers.size(), state.inputs.bytes);
    if (!in.recompute) b.device("slot activations" + of_chunk, state.inputs.buffers.size(), activations);
    b.device("weight-gradient inputs" + of_chunk, state.weight_pool.buffers.size(), state.weight_pool.bytes);
  }
  b.device("send buffers", e.sends.buffers.size(), e.sends.bytes);
  b.device("output gradients", e.grad_outputs.buffers.size(), e.grad_outputs.bytes);
  b.device("input gradients", e.grad_inputs.buffers.size(), e.grad_inputs.bytes);
  b.device("targets", 1, uint64_t(in.B) * in.T * sizeof(int));
  b.device("loss sum", 1, sizeof(double));
  // PipeDream's stashes, each a copy of the stage's parameters (pipeline/pipedream_walk.h's enable_pipedream).
  if (in.pipedream)
    b.device("stashed weight versions", pipedream_versions_kept(*in.pipedream, in.schedule.placement.p,
                                                                 in.microbatches, in.steps, stage, in.pipedream_drains) - 1,
             multiply(parameter_layout(in.config, chunks, {in.tp, 0}).size, sizeof(Element)));
  // With vertical sync, the gradients of the updates held apart beyond the stage's own allocation.
  if (in.pipedream)
    b.device("gradients held for updates",
             pipedream_gradients_kept(*in.pipedream, in.schedule.placement.p, in.microbatches, in.steps, stage,
                                      in.pipedream_drains) - 1,
             multiply(parameter_layout(in.config, chunks, {in.tp, 0}).size, sizeof(Element)));
  // The second compute stream's cuBLAS handle has a workspace of its own (an overlapped pair's
  // backward runs its GEMMs beside the forward's); its backward uses its chunk's scratch above.
  for (const Step& step : in.schedule.stages[stage])
    if (step.front().overlapped) {
      b.device("second compute stream's cuBLAS workspace", 1, in.cublas_workspace_bytes);
      break;
    }
}

template <typename Element>
StageMemoryPlan plan_stage(const MemoryPlanInput& in, int stage) {
  const GPTConfig& config = in.config;
  const std::vector<LayerRange> chunks = chunks_of_stage(in.virtual_stages, in.schedule.placement, stage);
  const ParameterLayout layout = parameter_layout(config, chunks, {in.tp, 0});  // every tp rank's shard is as large
  const uint64_t n = layout.size;
  PlanBuilder b;
  b.plan.stage = stage;
  b.device("parameters", 1, multiply(n, sizeof(Element)));
  b.device("gradients", 1, multiply(n, sizeof(Element)));
  if (has_part(chunks, &LayerRange::has_head))
    b.device("head's wte gradient", 1, uint64_t(config.padded_vocab_size / in.tp) * config.channels * sizeof(Element));
  b.device("cuBLAS workspace", 1, in.cublas_workspace_bytes);
  plan_executor_memory<Element>(in, stage, chunks, b);
  // The optimizer (create_optimizer): fp32 moments, master weights (of the shard with ZeRO-1), the
  // norm's and AdamW's tables.
  const uint64_t state = in.zero ? optimizer_shards(layout, in.dp).largest : n;
  b.device("AdamW moments", 2, multiply(state, sizeof(float)));
  if (in.bf16 && in.master_weights) b.device("master weights", 1, multiply(state, sizeof(float)));
  uint64_t norm_tensors = 0;
  for (const ParameterRegion& r : layout.regions) norm_tensors += r.tied_copy ? 0 : 1;
  b.device("norm workspace", 1, global_norm_workspace_size(int(layout.regions.size())) * sizeof(float));
  b.device("norm partials", 1, norm_slot_count(config.num_layers) * sizeof(float));
  b.device("squared norm", 1, sizeof(float));
  b.device("norm table", 1, norm_tensors * sizeof(NormTensor));
  b.device("non-finite ranks, norm", 2, sizeof(double));
  b.device("AdamW gate", 1, sizeof(AdamWGate));
  // AdamW's tables of one launch (trainer/step/adamw_tables.h): room for the stage's regions and
  // for adamw_region_blocks of the shard's capacity.
  b.device("AdamW region table", 1, layout.regions.size() * sizeof(AdamWRegion));
  b.device("AdamW block table", 1, adamw_region_blocks(state) * sizeof(int));
  // PipeDream's head sums its shares of wte's gradient per update (trainer/step/pipedream_updates.h).
  if (in.pipedream && has_part(chunks, &LayerRange::has_head) && !has_part(chunks, &LayerRange::has_embedding))
    b.device("head's wte gradient ring", pipedream_head_ring_size(*in.pipedream, in.schedule.placement.p),
             uint64_t(config.padded_vocab_size / in.tp) * config.channels * sizeof(Element));
  // Its updates' AdamW tables, of two launches (the other regions, then the tied copy's: each one's
  // regions and adamw_region_blocks of its elements, trainer/step/adamw_tables.h), and decisions
  // (trainer/step/pipedream_updates.h).
  if (in.pipedream) {
    b.device("PipeDream's AdamW region tables", 1, layout.regions.size() * sizeof(AdamWRegion));
    const uint64_t tied = tied_copy_count(layout);  // the tied copy of wte, updated apart
    b.device("PipeDream's AdamW block tables", 1,
             (adamw_region_blocks(n - tied) + adamw_region_blocks(tied)) * sizeof(int));
    const int decisions = pipedream_decisions_kept(*in.pipedream, in.schedule.placement.p, in.microbatches);
    b.device("PipeDream's update decisions", decisions, sizeof(AdamWGate));
    b.device("PipeDream's update norms", decisions, sizeof(double));
    // Without vertical sync each stage's own gates sum in scratch of their own (gate_on_own_sum).
    if (!in.pipedream->vertical_sync) {
      b.device("PipeDream's own gate: sum of squares", 1, sizeof(float));
      b.device("PipeDream's own gate: norm workspace", 1, global_norm_workspace_size(1) * sizeof(float));
      b.device("PipeDream's own gate: zero non-finite flag, tied copy's norm", 2, sizeof(double));
      b.device("PipeDream's own gate: tied copy's gate", 1, sizeof(AdamWGate));
    }
  }
  const int p = in.schedule.placement.p;
  const Mesh mesh = make_mesh(in.dp, in.tp, p, in.dp * in.tp * p, 0);
  b.plan.transient_bytes = connection_scratch_bytes(mesh);
  b.plan.peak_bytes = add(b.plan.resident_bytes, b.plan.transient_bytes);
  // PipeDream's stage 0 reads p - 1 microbatches of the next step ahead.
  const uint64_t held = in.microbatches + (in.pipedream ? p - 1 : 0);
  const uint64_t step_tokens = multiply(multiply(held, in.B), uint64_t(in.T) * sizeof(int));
  b.pinned("step's tokens", step_tokens);
  b.pinned("step's targets", step_tokens);
  b.pinned("step's figures", in.step_figures_bytes);
  return b.plan;
}

}  // namespace

std::vector<LayerRange> chunks_of_stage(const std::vector<LayerRange>& virtual_stages, const Placement& placement,
                                        int stage) {
  std::vector<LayerRange> chunks;
  for (int c = 0; c < placement.v; ++c) chunks.push_back(virtual_stages[placement.virtual_stage(stage, c)]);
  return chunks;
}

std::vector<StageMemoryPlan> plan_memory(const MemoryPlanInput& in) {
  check_sizes_fit(in);
  std::vector<StageMemoryPlan> plans;
  for (int stage = 0; stage < in.schedule.placement.p; ++stage)
    plans.push_back(in.bf16 ? plan_stage<__nv_bfloat16>(in, stage) : plan_stage<float>(in, stage));
  return plans;
}

int heaviest_stage(const std::vector<StageMemoryPlan>& plans) {
  int heaviest = 0;
  for (size_t s = 1; s < plans.size(); ++s)
    if (plans[s].peak_bytes > plans[heaviest].peak_bytes) heaviest = int(s);
  return heaviest;
}

std::string format_bytes(uint64_t bytes) {
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double value = double(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 5) value /= 1024, ++unit;
  char text[32];
  std::snprintf(text, sizeof(text), value < 10 ? "%.2f %s" : value < 100 ? "%.1f %s" : "%.0f %s", value, units[unit]);
  return text;
}
