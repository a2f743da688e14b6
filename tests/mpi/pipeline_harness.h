// What the pipeline tests (pipeline_test.cu, layouts_test.cu) share: a tiny model (L = 3 to 16,
// NH=2, C=16, T=8, B=2, V=64) trained on random tokens (or, for a documents case, V=128 on a text of
// short chapters, each microbatch at its own T: documents()) by the trainer of one case (layout,
// schedule, recompute, microbatches, layer split, fp32 or bf16), the single-stage run of the
// same global batch and element type it must reproduce, and the comparison of its losses and
// gradient norms and of its gradients after the first step, and of its replicas' parameters.
// Every run, the references included, also checks its rank's measured device peak against the
// memory plan (pipeline/memory_plan.h).
// Every function that takes or makes groups is collective over MPI_COMM_WORLD.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iomanip>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/nccl_check.cuh"
#include "kernels/device_memory.cuh"
#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/execute.h"
#include "pipeline/schedule.h"
#include "tests/device_buffer.h"
#include "tests/mpi/trace_check.h"
#include "tests/random_chapters.h"
#include "tests/random_tokens.h"
#include "tests/scaled_error.h"
#include "trainer/data/data.h"
#include "trainer/step/optimizer.h"
#include "comm/host_exchange.h"
#include "trainer/step/trainer.h"

namespace pipeline_harness {

inline constexpr int kB = 2, kT = 8;
// The fused attention takes heads of 16 channels or more (kernels/fused_attention.cuh): its model is wider.
inline GPTConfig config_of(int layers, bool fused = false) { return make_gpt_config(layers, 2, fused ? 32 : 16, kT, 64); }
// Clipping at 0.1 is below the tiny model's gradient norm (about 1), so every step clips.
inline const AdamWSettings kSettings{0.9, 0.95, 1e-8, 0.1, 0.1};
inline constexpr double kLearningRate = 3e-3;

struct Case {
  int dp, pp;
  ScheduleKind schedule;
  int v;
  bool recompute;
  int m;  // microbatches per replica
  int layers;
  std::vector<int> layers_per_stage = {};  // --layers-per-stage; empty: the even split
  bool bf16 = false;                       // bf16 parameters, with fp32 master weights
  int microbatch_group = 0;                // interleaved's --microbatch-group; 0: pp
  bool zero = false;                       // --zero 1: ZeRO-1's optimizer-state shards over the replicas
  bool fused = false;                      // --attention fused (on config_of's wider model)
  bool documents = false;                  // document-aligned microbatches of documents(), each at its own T <= kT
};

inline GPTConfig config_of(const Case& c) {
  return c.documents ? make_gpt_config(c.layers, 2, c.fused ? 32 : 16, kT, 128) : config_of(c.layers, c.fused);
}

inline std::string layers_per_stage_text(const std::vector<int>& counts) {
  std::string text;
  for (size_t i = 0; i < counts.size(); ++i) text += (i ? "," : " split ") + std::to_string(counts[i]);
  return text;
}

inline std::string describe(const Case& c) {
  return "dp " + std::to_string(c.dp) + " pp " + std::to_string(c.pp) + " " + schedule_name(c.schedule) + " v " +
         std::to_string(c.v) + (c.recompute ? " recompute" : "") + " m " + std::to_string(c.m) + " L " +
         std::to_string(c.layers) + layers_per_stage_text(c.layers_per_stage) + (c.bf16 ? " bf16" : "") +
         (c.microbatch_group ? " group " + std::to_string(c.microbatch_group) : "") + (c.zero ? " zero 1" : "") + (c.fused ? " fused" : "") +
         (c.documents ? " documents" : "");
}

inline int rank_in_world() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

inline int size_of_world() {
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

inline const TokenDataset& dataset() { return random_tokens(); }

// 600 chapters of tests/random_chapters.h: microbatches of B = 2 at maxT = 8 have T of 6, 7 or 8,
// most with padding (the first three: 7, 8 and 6).
inline const TokenDataset& documents() {
  static const TokenDataset data = random_chapters(600, "chapters of random letters");
  return data;
}

inline std::vector<float> initial_parameters(const GPTConfig& config) {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, 1234);
  return parameters;
}

struct Outcome {
  std::vector<double> losses;                // per step
  std::vector<double> grad_norms;            // per step, before clipping
  std::vector<float> gradients;              // after step 1, in llm.c's layout (the rank's regions valid)
  std::vector<ParameterRegion> regions;      // the rank's
  std::vector<std::pair<int, int>> layers;   // the rank's chunks' [first, end) layers, in chunk order
  std::vector<ExecutedStep> trace;           // what step 1's steps used
  std::vector<int> lengths;                  // step 1's microbatch lengths on the rank (its replica's)
  std::vector<double> real_tokens, positions;  // per step, StepResult's
  StageSchedule schedule;                    // the rank's stage's
  Placement placement;                       // the schedule's
  ExecutorAccounting accounting;             // after the last step
  ExecutorAccounting first_accounting;       // after step 1 (the slots the trace used)
  std::vector<float> replica_state;          // with replicas, after the last step: replica_state()'s
  std::vector<float> parameters;             // after the last step, llm.c's layout (zeros outside the stage)
  std::vector<float> m, v, master;           // the same; with ZeRO-1's shards, zeros outside the replica's
  std::vector<ParameterRegion> owned;        // the regions whose optimizer state the rank keeps
  uint64_t stage_size = 0;                   // elements of the rank's stage
  uint64_t planned_peak = 0;                 // device bytes, the rank's memory plan's (the measured peak is it)
};

// What the replicas of a stage must hold bitwise alike after a step, back to back, each in
// llm.c's layout (zeros outside the stage's regions): the parameters, and with master weights
// also those and the AdamW moments (a master weight can drift while its bf16 value rounds alike).
inline constexpr const char* kReplicaStateNames[] = {"parameters", "master", "m", "v"};
template <typename Element>
std::vector<float> replica_state(const Trainer<Element>& trainer) {
  std::vector<float> state = download_parameters(trainer);
  const std::vector<float> master = download_master_weights(trainer);
  if (master.empty()) return state;
  std::vector<float> m, v;
  download_moments(trainer, m, v);
  for (const std::vector<float>& part : {std::cref(master), std::cref(m), std::cref(v)})
    state.insert(state.end(), part.begin(), part.end());
  return state;
}

// bf16 runs round stochastically with this seed.
inline constexpr uint64_t kRoundingSeed = 5;

// schedule_file: a grid to run instead of c.schedule (--schedule-file), or nullptr.
template <typename Element>
Outcome run_in(const Case& c, const CommGroups& groups, int steps, const ScheduleGrid* schedule_file) {
  const GPTConfig config = config_of(c);
  PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, c.layers_per_stage};
  layout.attention = c.fused ? AttentionKind::fused : AttentionKind::materialized;
  if (schedule_file != nullptr) layout.schedule_file = *schedule_file;
  layout.microbatch_group = c.microbatch_group;
  layout.zero = c.zero;
  const bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  const MixedPrecision precision{true, kRoundingSeed};
  const StageMemoryPlan plan =
      plan_memory(memory_plan_input(config, kB, kT, layout, groups.mesh, bf16, precision))[groups.mesh.pp_rank];
  reset_device_memory_peak();
  const size_t bytes_before = device_memory_counts().bytes_in_use;
  Trainer<Element> trainer = create_trainer<Element>(config, kB, kT, layout, groups, precision);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  DocumentReader document_reader = make_document_reader(documents(), kB, kT, false, 1);
  Outcome outcome;
  for (int t = 1; t <= steps; ++t) {
    const StepResult step = c.documents
                                ? train_step(trainer, document_reader, kT, kSettings, kLearningRate, t)
                                : train_step(trainer, reader, kSettings, kLearningRate, t);
    outcome.losses.push_back(step.loss);
    outcome.grad_norms.push_back(step.grad_norm);
    outcome.real_tokens.push_back(step.real_tokens);
    outcome.positions.push_back(step.positions);
    if (t == 1) {
      outcome.lengths = trainer.shape.lengths;
      outcome.gradients = download_gradients(trainer);
      outcome.trace = trainer.executor.trace;
      outcome.first_accounting = trainer.executor.accounting;
    }
  }
  // The memory plan is the whole run's peak, to the byte: set-up, every step, every schedule step.
  EXPECT_EQ(device_memory_counts().peak_bytes - bytes_before, plan.peak_bytes)
      << describe(c) << ": stage " << groups.mesh.pp_rank << "'s measured peak against its memory plan";
  if (groups.mesh.dp > 1) outcome.replica_state = replica_state(trainer);
  outcome.parameters = download_parameters(trainer);
  download_moments(trainer, outcome.m, outcome.v);
  outcome.master = download_master_weights(trainer);
  outcome.owned = trainer.optimizer.regions;
  outcome.stage_size = trainer.parameter_layout.size;
  outcome.planned_peak = plan.peak_bytes;
  outcome.regions = trainer.parameter_layout.regions;
  for (const LayerRange& range : trainer.chunks) outcome.layers.push_back({range.first_layer, range.end_layer});
  outcome.schedule = trainer.executor.schedule;
  outcome.placement = trainer.placement;
  outcome.accounting = trainer.executor.accounting;
  destroy_trainer(trainer);
  return outcome;
}

inline Outcome run(const Case& c, const CommGroups& groups, int steps, const ScheduleGrid* schedule_file = nullptr) {
  return c.bf16 ? run_in<__nv_bfloat16>(c, groups, steps, schedule_file)
                : run_in<float>(c, groups, steps, schedule_file);
}

// The single-stage, single-replica run (a mesh of one) of (global microbatches, layers, steps,
// bf16, fused, documents): its losses and gradient norms, and its gradients after step 1.
using ReferenceKey = std::tuple<int, int, int, bool, bool, bool>;
inline std::map<ReferenceKey, Outcome>& reference_cache() {
  static std::map<ReferenceKey, Outcome> cache;
  return cache;
}

// Fills the cache with the references of the cases (those of a step count, with their global
// batch). The missing ones are dealt out over the world, one rank computes each and broadcasts
// it (NCCL, whose waits sleep): with 8 ranks on 2 cores, every rank computing every reference
// itself took about 8 s of the layouts suite's 30 s (the rest is the cases' own steps).
inline void share_references(const std::vector<Case>& cases, int steps, const CommGroups& groups) {
  std::vector<ReferenceKey> missing;
  for (const Case& c : cases) {
    const ReferenceKey key{c.m * c.dp, c.layers, steps, c.bf16, c.fused, c.documents};
    if (!reference_cache().count(key) && std::find(missing.begin(), missing.end(), key) == missing.end())
      missing.push_back(key);
  }
  const int size = groups.mesh.world_size, rank = groups.mesh.world_rank;
  CommGroups alone = create_world_groups(make_mesh(1, 1, 1, 0));
  for (size_t i = rank; i < missing.size(); i += size) {
    Case single{1, 1, ScheduleKind::one_f_one_b, 1, false, std::get<0>(missing[i]), std::get<1>(missing[i]),
                {}, std::get<3>(missing[i])};
    single.fused = std::get<4>(missing[i]);
    single.documents = std::get<5>(missing[i]);
    reference_cache()[missing[i]] = run(single, alone, steps);
  }
  if (size == 1) return;
  for (size_t i = 0; i < missing.size(); ++i) {
    Outcome& reference = reference_cache()[missing[i]];
    const int owner = int(i % size);
    if (owner != rank) {
      reference.losses.resize(steps);
      reference.grad_norms.resize(steps);
      Case single{};
      single.layers = std::get<1>(missing[i]);
      single.fused = std::get<4>(missing[i]);
      single.documents = std::get<5>(missing[i]);
      reference.gradients.resize(num_parameters(config_of(single)));
      reference.lengths.resize(std::get<0>(missing[i]));
    }
    DeviceBuffer<double> losses(reference.losses);
    DeviceBuffer<double> grad_norms(reference.grad_norms);
    DeviceBuffer<float> gradients(reference.gradients);
    NCCL_CHECK(ncclBroadcast(losses.data(), losses.data(), steps, ncclFloat64, owner, groups.world, nullptr));
    NCCL_CHECK(ncclBroadcast(grad_norms.data(), grad_norms.data(), steps, ncclFloat64, owner, groups.world, nullptr));
    NCCL_CHECK(ncclBroadcast(gradients.data(), gradients.data(), gradients.size(), ncclFloat32, owner, groups.world,
                             nullptr));
    DeviceBuffer<int> lengths(reference.lengths);
    NCCL_CHECK(ncclBroadcast(lengths.data(), lengths.data(), lengths.size(), ncclInt32, owner, groups.world, nullptr));
    reference.lengths = lengths.to_host();
    reference.losses = losses.to_host();
    reference.grad_norms = grad_norms.to_host();
    reference.gradients = gradients.to_host();
  }
}

// The layers a case's --layers-per-stage gives the rank's stage, in chunk order: counted off in
// virtual-stage order, chunk k of stage s being virtual stage placement.virtual_stage(s, k).
inline std::vector<std::pair<int, int>> layers_of_stage(const Case& c, const Placement& placement, int stage) {
  std::vector<std::pair<int, int>> first_and_end;
  int first = 0;
  for (int count : c.layers_per_stage) {
    first_and_end.push_back({first, first + count});
    first += count;
  }
  std::vector<std::pair<int, int>> own;
  for (int k = 0; k < placement.v; ++k) own.push_back(first_and_end[placement.virtual_stage(stage, k)]);
  return own;
}

inline const Outcome& reference(const Case& c, int steps) {
  return reference_cache().at({c.m * c.dp, c.layers, steps, c.bf16, c.fused, c.documents});
}

// The groups of a layout for the length of a test (creation and destruction are collective).
struct WorldGroups {
  explicit WorldGroups(int dp, int pp, int tp = 1) {
    groups = create_world_groups(make_mesh(dp, tp, pp, size_of_world(), rank_in_world()));
  }
  ~WorldGroups() { destroy_world_groups(groups); }
  CommGroups groups;
};

// llm.c's tensor that element `index` of the whole layout falls in, and the index within it.
inline std::string parameter_at(const GPTConfig& config, size_t index) {
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(config);
  int tensor = kNumParameterTensors - 1;
  while (offsets[tensor] > index) --tensor;
  return std::string(parameter_tensor_name(tensor)) + "[" + std::to_string(index - offsets[tensor]) + "]";
}

// Every replica of a stage (the ranks of one pp_rank, its data-parallel group) holds bitwise its
// replica 0's state after the last step: all applied the same all-reduced gradients with the same
// AdamW and the same rounding key. Every rank's state is gathered (one NCCL all-gather over the
// world per case, whose waits sleep; 4 layers: 15,328 parameters, 61 KB a rank in fp32, 245 KB in
// bf16) and world rank 0 fails the case at each replica's first difference in each of parameters,
// master, m and v: there its failures are printed (other ranks print only that they failed).
// With the downloads, 0.5 to 1.0 s of a rank's 93 s for PipelineLayouts.* at -np 4 (104 cases
// with replicas; MPI_Gather, whose waits spin, took 0.8 to 2.0 s; CPU build, 2026-11-26).
// Collective over the world; without replicas there is nothing to compare.
inline void expect_replicas_agree(const Case& c, const Outcome& outcome, const CommGroups& groups) {
  const Mesh& mesh = groups.mesh;
  if (mesh.dp == 1) return;
  const size_t count = outcome.replica_state.size();
  DeviceBuffer<float> mine(outcome.replica_state), every(count * mesh.world_size);
  NCCL_CHECK(ncclAllGather(mine.data(), every.data(), count, ncclFloat32, groups.world, nullptr));
  const std::vector<float> all = every.to_host();  // waits for the gather, whose buffers go next
  if (mesh.world_rank != 0) return;
  const GPTConfig config = config_of(c);
  const size_t n = num_parameters(config);
  const auto same_bits = [](float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); };
  for (int rank = mesh.pp; rank < mesh.world_size; ++rank)  // world rank = dp_rank pp + pp_rank
    for (size_t first = 0; first < count; first += n) {
      const float* own = all.data() + rank * count + first;
      const float* replica0 = all.data() + rank % mesh.pp * count + first;
      const size_t at = std::mismatch(own, own + n, replica0, same_bits).first - own;
      if (at < n)
        ADD_FAILURE() << "stage " << rank % mesh.pp << ", replica " << rank / mesh.pp << ": "
                      << kReplicaStateNames[first / n] << " differ from replica 0's first at " << at << " ("
                      << parameter_at(config, at) << "): " << std::setprecision(9) << own[at] << " against "
                      << replica0[at];
    }
}

// How far a case may be from its reference: relative to each later step's reference loss (step
// 1's is bitwise, expect_cases_match), each step's gradient norm, and the largest reference
// magnitude of each gradient region after step 1. All 0: bitwise.
struct Tolerance {
  double loss, norm, gradient;
};
inline constexpr Tolerance kBitwise{0, 0, 0};

// Every case (all of one layout) trained for `steps` clipped steps against the reference: the
// loss and the gradient norm before clipping of every step, and after step 1 every gradient
// region the rank owns, bitwise equal (kBitwise: dp = 1), or within the tolerance (dp > 1, where
// the replicas' sums are added in another order than the single run's microbatch loop), and the
// replicas of each stage alike after the last step (expect_replicas_agree). Step 1's loss is
// bitwise with replicas too: the same parameters and tokens give each microbatch the same mean
// loss on any layout (its BT float losses summed in double, over BT = 16), and the loss is the
// double sum of those means over m dp, whose association cannot matter: with this model's losses
// (a few units each; ln 64 = 4.2 at the start) every partial sum is exact, using fewer than 40 of
// a double's 53 bits. A loss summed with roundings (in float) would show there. The
// norm is compared itself because every step clips and AdamW hardly notices a constant error in
// the clip factor: a norm wrong by 1e-4 moves the losses by less than the replicas' tolerance.
// With a --layers-per-stage, the rank's layers are the split's. On a GPU node the stages and the
// reference run on different devices: bitwise still holds on devices of one model, as our
// kernels fix their order of additions and cuBLAS gives the same bits on GPUs of the same
// architecture and SM count (its reproducibility guarantee), not across different models.
inline void expect_cases_match(const std::vector<Case>& cases, int steps, const Tolerance& tolerance) {
  WorldGroups world(cases.front().dp, cases.front().pp);
  share_references(cases, steps, world.groups);
  const bool bitwise = tolerance.loss == 0 && tolerance.norm == 0 && tolerance.gradient == 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome outcome = run(c, world.groups, steps);
    const Outcome& expected = reference(c, steps);
    expect_replicas_agree(c, outcome, world.groups);
    trace_check::expect_trace_follows_schedule(outcome.trace, outcome.schedule, outcome.placement,
                                               world.groups.mesh.pp_rank, c.recompute, outcome.first_accounting);
    if (!c.layers_per_stage.empty()) {
      EXPECT_EQ(outcome.layers, layers_of_stage(c, outcome.placement, world.groups.mesh.pp_rank));
    }
    // Every rank computed its replica's lengths from the data position alone: the single run's.
    const auto replica_lengths = expected.lengths.begin() + world.groups.mesh.dp_rank * c.m;
    EXPECT_TRUE(std::equal(outcome.lengths.begin(), outcome.lengths.end(), replica_lengths, replica_lengths + c.m))
        << "step 1's microbatch lengths on this rank differ from the single run's";
    if (bitwise) {
      EXPECT_EQ(outcome.losses, expected.losses);
      EXPECT_EQ(outcome.grad_norms, expected.grad_norms);
    } else {
      EXPECT_EQ(outcome.losses[0], expected.losses[0])
          << "step 1's loss, off by " << outcome.losses[0] - expected.losses[0];
      for (int i = 1; i < steps; ++i)
        EXPECT_NEAR(outcome.losses[i], expected.losses[i], tolerance.loss * std::fabs(expected.losses[i]))
            << "step " << i + 1;
      for (int i = 0; i < steps; ++i) {
        EXPECT_NEAR(outcome.grad_norms[i], expected.grad_norms[i], tolerance.norm * expected.grad_norms[i])
            << "gradient norm, step " << i + 1;
      }
    }
    for (const ParameterRegion& r : outcome.regions) {
      const auto got = outcome.gradients.begin() + r.full_offset;
      const auto want = expected.gradients.begin() + r.full_offset;
      const double error = max_error_relative_to_scale({got, got + r.count}, {want, want + r.count});
      if (bitwise) {
        EXPECT_TRUE(std::equal(got, got + r.count, want)) << parameter_tensor_name(r.tensor) << " at " << r.full_offset
                                                          << " differs by up to " << error << " of its scale";
      } else {
        EXPECT_LE(error, tolerance.gradient) << parameter_tensor_name(r.tensor) << " at " << r.full_offset;
      }
    }
  }
}

}  // namespace pipeline_harness
