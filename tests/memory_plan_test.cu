// The memory plan (pipeline/memory_plan.h) on its own: its in-flight counts against the
// simulator's (an independent count of the same grid), each item against the model's own byte
// functions and the parameter count, and its errors. Host code only. That the plan is what a
// run allocates and peaks at, to the byte, is checked on every layout of the layout tests
// (tests/mpi/pipeline_harness.h) and by create_trainer itself.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/layer_split.h"
#include "pipeline/memory_plan.h"
#include "pipeline/pipedream.h"
#include "pipeline/simulate.h"

namespace {

constexpr int kB = 2, kT = 8;
GPTConfig config_of(int layers) { return make_gpt_config(layers, 2, 16, kT, 64); }

MemoryPlanInput input_of(ScheduleKind kind, int p, int m, int v, int layers, bool recompute = false,
                         bool bf16 = false, bool master_weights = true) {
  const PipelineSchedule schedule = make_pipeline_schedule(kind, p, m, v);
  return {config_of(layers), kB,        kT,   m, 1, schedule, split_layers(layers, p, schedule.placement.v),
          recompute,         bf16,      bf16 && master_weights, 24, 4 << 20};
}

// The item called name, or of count 0 when the plan has none.
MemoryItem item(const StageMemoryPlan& plan, const std::string& name) {
  for (const MemoryItem& it : plan.device)
    if (it.name == name) return it;
  return {name, 0, 0, 0};
}

std::string of_chunk(int chunk, int v) { return v > 1 ? ", chunk " + std::to_string(chunk) : ""; }

}  // namespace

TEST(MemoryPlan, SlotsAndWeightBuffersAreTheSimulatorsPeaksInFlight) {
  struct Layout {
    ScheduleKind kind;
    int p, m, v;
  };
  const std::vector<Layout> layouts = {
      {ScheduleKind::afab, 4, 6, 1},        {ScheduleKind::one_f_one_b, 4, 6, 1}, {ScheduleKind::one_f_one_b, 4, 2, 1},
      {ScheduleKind::interleaved, 2, 4, 2}, {ScheduleKind::interleaved, 4, 8, 2}, {ScheduleKind::zb_h1, 4, 5, 1},
      {ScheduleKind::zb_h2, 4, 5, 1},       {ScheduleKind::zb_v, 4, 5, 2},        {ScheduleKind::zb_v, 2, 3, 2}};
  for (const Layout& l : layouts) {
    const MemoryPlanInput input = input_of(l.kind, l.p, l.m, l.v, 2 * l.p * std::max(l.v, 2));
    const std::vector<StageMemoryPlan> plans = plan_memory(input);
    const Simulation simulation = simulate(input.schedule.stages, {1, 1, 1, 0}, input.schedule.placement.kind);
    ASSERT_EQ(plans.size(), size_t(l.p));
    const int v = input.schedule.placement.v;
    for (int s = 0; s < l.p; ++s)
      for (int c = 0; c < v; ++c) {
        const std::string where = schedule_name(l.kind) + " p " + std::to_string(l.p) + " m " + std::to_string(l.m) +
                                  " stage " + std::to_string(s) + " chunk " + std::to_string(c);
        EXPECT_EQ(item(plans[s], "slot inputs" + of_chunk(c, v)).count, uint64_t(simulation.stages[s].chunk_peak_in_flight[c]))
            << where;
        EXPECT_EQ(item(plans[s], "slot activations" + of_chunk(c, v)).count,
                  uint64_t(simulation.stages[s].chunk_peak_in_flight[c]))
            << where;
        EXPECT_EQ(item(plans[s], "weight-gradient inputs" + of_chunk(c, v)).count,
                  uint64_t(simulation.stages[s].chunk_peak_pending[c]))
            << where;
      }
  }
}

TEST(MemoryPlan, EachItemIsTheModelsOwnByteCount) {
  const MemoryPlanInput input = input_of(ScheduleKind::one_f_one_b, 1, 3, 1, 2);
  const StageMemoryPlan plan = plan_memory(input)[0];
  const LayerRange whole = input.virtual_stages[0];
  const uint64_t n = num_parameters(input.config);
  EXPECT_EQ(item(plan, "parameters").bytes, n * sizeof(float));
  EXPECT_EQ(item(plan, "gradients").bytes, n * sizeof(float));
  EXPECT_EQ(item(plan, "AdamW moments").bytes, 2 * n * sizeof(float));
  EXPECT_EQ(item(plan, "master weights").count, 0u);  // fp32: the parameters are their own
  EXPECT_EQ(item(plan, "head's wte gradient").bytes, uint64_t(input.config.padded_vocab_size) * 16 * sizeof(float));
  // One stage runs each forward's backward right after it: one slot, whatever m.
  EXPECT_EQ(item(plan, "slot activations").count, 1u);
  EXPECT_EQ(item(plan, "slot activations").bytes_each, activation_bytes<float>(input.config, kB, kT, whole));
  EXPECT_EQ(item(plan, "slot inputs").bytes_each, uint64_t(kB) * kT * sizeof(int));  // the tokens
  EXPECT_EQ(item(plan, "backward scratch").bytes, backward_scratch_bytes<float>(input.config, kB, kT, whole));
  EXPECT_EQ(item(plan, "send buffers").count + item(plan, "output gradients").count, 0u);  // no neighbours
  uint64_t sum = 0, allocations = 0;
  for (const MemoryItem& it : plan.device) {
    EXPECT_EQ(it.bytes, it.count * it.bytes_each) << it.name;
    sum += it.bytes;
    allocations += it.count;
  }
  EXPECT_EQ(plan.resident_bytes, sum);
  EXPECT_EQ(plan.allocations, allocations);
  EXPECT_EQ(plan.transient_bytes, 0u);  // a world of one connects nothing
  EXPECT_EQ(plan.peak_bytes, plan.resident_bytes);
  EXPECT_EQ(plan.pinned_host_bytes, 2 * 3 * uint64_t(kB) * kT * sizeof(int) + 24);
}

TEST(MemoryPlan, RecomputeKeepsInputsInTheSlotsAndOneWorkingSetPerChunk) {
  const MemoryPlanInput input = input_of(ScheduleKind::interleaved, 2, 4, 2, 4, true);
  for (const StageMemoryPlan& plan : plan_memory(input))
    for (int c = 0; c < 2; ++c) {
      const LayerRange range = input.virtual_stages[input.schedule.placement.virtual_stage(plan.stage, c)];
      EXPECT_EQ(item(plan, "slot activations" + of_chunk(c, 2)).count, 0u);
      EXPECT_GT(item(plan, "slot inputs" + of_chunk(c, 2)).count, 0u);
      EXPECT_EQ(item(plan, "recompute working set" + of_chunk(c, 2)).count, 1u);
      EXPECT_EQ(item(plan, "recompute working set" + of_chunk(c, 2)).bytes,
                activation_bytes<float>(input.config, kB, kT, range));
    }
  // With recompute a forward's output waits for its send in a send buffer (the working set is
  // overwritten by the next forward); both stages send.
  for (const StageMemoryPlan& plan : plan_memory(input)) EXPECT_GT(item(plan, "send buffers").count, 0u);
  for (const StageMemoryPlan& plan : plan_memory(input_of(ScheduleKind::interleaved, 2, 4, 2, 4)))
    EXPECT_EQ(item(plan, "send buffers").count, 0u);
}

TEST(MemoryPlan, Bf16HalvesTheElementsAndKeepsFp32MomentsAndMasterWeights) {
  const uint64_t n = num_parameters(config_of(2));
  const StageMemoryPlan with = plan_memory(input_of(ScheduleKind::one_f_one_b, 1, 2, 1, 2, false, true, true))[0];
  const StageMemoryPlan without = plan_memory(input_of(ScheduleKind::one_f_one_b, 1, 2, 1, 2, false, true, false))[0];
  const StageMemoryPlan fp32 = plan_memory(input_of(ScheduleKind::one_f_one_b, 1, 2, 1, 2))[0];
  EXPECT_EQ(item(with, "parameters").bytes, 2 * n);
  EXPECT_EQ(item(with, "AdamW moments").bytes, 8 * n);
  EXPECT_EQ(item(with, "master weights").bytes, 4 * n);
  EXPECT_EQ(item(without, "master weights").count, 0u);
  EXPECT_EQ(with.resident_bytes - without.resident_bytes, 4 * n);
  EXPECT_LT(item(with, "slot activations").bytes, item(fp32, "slot activations").bytes);
}

// --attention fused: each stage's slots, working set and backward scratch are the model's fused
// byte counts, below the materialised ones (heads of 16 channels, the fused kernels' smallest).
TEST(MemoryPlan, FusedAttentionSizesTheSlotsAndScratchByItsOwnBytes) {
  for (bool recompute : {false, true}) {
    MemoryPlanInput input = input_of(ScheduleKind::one_f_one_b, 2, 3, 1, 4, recompute);
    input.config = make_gpt_config(4, 2, 32, kT, 64);
    const std::vector<StageMemoryPlan> materialized = plan_memory(input);
    input.attention = AttentionKind::fused;
    const std::vector<StageMemoryPlan> fused = plan_memory(input);
    for (const StageMemoryPlan& plan : fused) {
      const LayerRange range = input.virtual_stages[plan.stage];
      const uint64_t activations = activation_bytes<float>(input.config, kB, kT, range, 1, AttentionKind::fused);
      const std::string slots = recompute ? "recompute working set" : "slot activations";
      EXPECT_EQ(item(plan, slots).bytes_each, activations) << plan.stage;
      EXPECT_LT(item(plan, slots).bytes, item(materialized[plan.stage], slots).bytes) << plan.stage;
      EXPECT_EQ(item(plan, "backward scratch").bytes,
                backward_scratch_bytes<float>(input.config, kB, kT, range, 1, AttentionKind::fused));
      EXPECT_LT(plan.peak_bytes, materialized[plan.stage].peak_bytes);
    }
  }
}

TEST(MemoryPlan, AByteCountBeyond64BitsIsAnErrorNotAWrappedNumber) {
  MemoryPlanInput input = input_of(ScheduleKind::one_f_one_b, 1, 1, 1, 1);
  // 2^30 sequences of 1024 tokens of 16384 channels: 2^54 elements in one activation tensor.
  input.B = 1 << 30;
  input.T = 1024;
  input.config = make_gpt_config(1, 16, 16384, 1024, 50257);
  try {
    plan_memory(input);
    FAIL() << "planned 2^30 sequences of 1024 tokens of a 16384-channel model";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("64 bits"), std::string::npos) << error.what();
    EXPECT_EQ(std::string(error.what()).find('\n'), std::string::npos) << error.what();
  }
}

TEST(MemoryPlan, BytesForPeople) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(uint64_t(24) << 20), "24.0 MiB");
  EXPECT_EQ(format_bytes(uint64_t(500) << 30), "500 GiB");
  EXPECT_EQ(format_bytes(~uint64_t(0)), "16.0 EiB");
}

// PipeDream at p = 4, m = 4 over 6 steps, counts derived by hand (docs/pipeline.md, "Versions
// kept"): with stashing and K = 1 stage s keeps p - s versions, p - s - 1 of them stashed copies of
// its parameters; without stashing none; the head stage (without the embedding) sums its shares of
// wte's gradient in (p - 2) / K + 2 buffers of Vp C (4 at K = 1, 3 at K = 2); stage 0 reads p - 1
// microbatches ahead, so every stage's pinned tokens and targets hold m + p - 1 = 7 of them.
TEST(MemoryPlan, PipeDreamCountsTheStashedVersionsTheHeadsRingAndTheReadAhead) {
  constexpr int p = 4, m = 4, steps = 6;
  MemoryPlanInput input = input_of(ScheduleKind::one_f_one_b, p, m, 1, 8);
  input.schedule = {Placement{PlacementKind::ring, p, 1}, pipedream_run_schedules(p, m, steps)};
  input.steps = steps;
  const uint64_t wte = uint64_t(input.config.padded_vocab_size) * 16 * sizeof(float);
  struct Case {
    PipeDreamRule rule;
    std::vector<uint64_t> stashed;  // per stage
    uint64_t ring;                  // on the last stage
  };
  const std::vector<Case> cases = {{{1, true, false}, {3, 2, 1, 0}, 4},
                                   {{1, false, false}, {0, 0, 0, 0}, 4},
                                   {{2, true, false}, {2, 1, 1, 0}, 3}};
  for (const auto& [rule, stashed, ring] : cases) {
    input.pipedream = rule;
    const std::vector<StageMemoryPlan> plans = plan_memory(input);
    for (int s = 0; s < p; ++s) {
      const std::string where = "K " + std::to_string(rule.update_every) + (rule.weight_stashing ? " stashing" : "") +
                                " stage " + std::to_string(s);
      EXPECT_EQ(item(plans[s], "stashed weight versions").count, stashed[s]) << where;
      if (stashed[s] > 0) {
        EXPECT_EQ(item(plans[s], "stashed weight versions").bytes_each, item(plans[s], "parameters").bytes) << where;
      }
      EXPECT_EQ(item(plans[s], "head's wte gradient ring").count, s == p - 1 ? ring : 0u) << where;
      EXPECT_EQ(item(plans[s], "head's wte gradient ring").bytes_each, s == p - 1 ? wte : 0u) << where;
      EXPECT_EQ(plans[s].pinned_host_bytes, 2 * 7 * uint64_t(kB) * kT * sizeof(int) + 24) << where;
    }
  }
}
