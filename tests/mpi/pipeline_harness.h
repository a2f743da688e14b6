// What the pipeline tests (pipeline_test.cu, layouts_test.cu) share: a tiny model (L=4 or 8,
// NH=2, C=16, T=8, B=2, V=64) trained on random tokens by the trainer of one case (layout,
// schedule, recompute, microbatches), the single-stage run of the same global batch it must
// reproduce, and the comparison of its loss curve and its gradients after the first step.
// Every function that takes or makes groups is collective over MPI_COMM_WORLD.
#pragma once
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/nccl_check.cuh"
#include "model/config.h"
#include "model/parameters.h"
#include "pipeline/execute.h"
#include "pipeline/schedule.h"
#include "tests/device_buffer.h"
#include "tests/mpi/trace_check.h"
#include "trainer/data.h"
#include "trainer/optimizer.h"
#include "trainer/ranks.h"
#include "trainer/trainer.h"

namespace pipeline_harness {

inline constexpr int kB = 2, kT = 8;
inline GPTConfig config_of(int layers) { return make_gpt_config(layers, 2, 16, kT, 64); }
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
};

inline std::string describe(const Case& c) {
  return "dp " + std::to_string(c.dp) + " pp " + std::to_string(c.pp) + " " + schedule_name(c.schedule) + " v " +
         std::to_string(c.v) + (c.recompute ? " recompute" : "") + " m " + std::to_string(c.m) + " L " +
         std::to_string(c.layers);
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

inline const TokenDataset& dataset() {
  static const TokenDataset data = [] {
    TokenDataset d;
    std::mt19937_64 generator(7);
    for (int i = 0; i < 4096; ++i) d.tokens.push_back(uint16_t(generator() % 64));
    d.vocab_size = 64;
    d.source = "random tokens";
    return d;
  }();
  return data;
}

inline std::vector<float> initial_parameters(const GPTConfig& config) {
  std::vector<float> parameters;
  init_gpt2_parameters(parameters, config, 1234);
  return parameters;
}

struct Outcome {
  std::vector<double> losses;                // per step
  std::vector<float> gradients;              // after step 1, in llm.c's layout (the rank's regions valid)
  std::vector<ParameterRegion> regions;      // the rank's
  std::vector<ExecutedStep> trace;           // what step 1's steps used
  StageSchedule schedule;                    // the rank's stage's
  ExecutorAccounting accounting;
};

inline Outcome run(const Case& c, const CommGroups& groups, int steps) {
  const GPTConfig config = config_of(c.layers);
  const PipelineLayout layout{c.schedule, c.m, c.v, c.recompute, {}};
  Trainer trainer = create_trainer(config, kB, kT, layout, groups);
  upload_parameters(trainer, initial_parameters(config));
  BatchReader reader = make_batch_reader(dataset(), kB, kT, false, 1);
  Outcome outcome;
  for (int t = 1; t <= steps; ++t) {
    outcome.losses.push_back(train_step(trainer, reader, kSettings, kLearningRate, t).loss);
    if (t == 1) {
      outcome.gradients = download_gradients(trainer);
      outcome.trace = trainer.executor.trace;
    }
  }
  outcome.regions = trainer.parameter_layout.regions;
  outcome.schedule = make_schedule(c.schedule, c.pp, c.m, c.v, groups.mesh.pp_rank);
  outcome.accounting = trainer.executor.accounting;
  destroy_trainer(trainer);
  return outcome;
}

// The single-stage, single-replica run (a mesh of one) of (global microbatches, layers, steps):
// its losses, and its gradients after step 1.
using ReferenceKey = std::tuple<int, int, int>;
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
    const ReferenceKey key{c.m * c.dp, c.layers, steps};
    if (!reference_cache().count(key) && std::find(missing.begin(), missing.end(), key) == missing.end())
      missing.push_back(key);
  }
  const int size = groups.mesh.world_size, rank = groups.mesh.world_rank;
  CommGroups alone = create_world_groups(make_mesh(1, 1, 1, 0));
  for (size_t i = rank; i < missing.size(); i += size) {
    const Case single{1, 1, ScheduleKind::one_f_one_b, 1, false, std::get<0>(missing[i]), std::get<1>(missing[i])};
    reference_cache()[missing[i]] = run(single, alone, steps);
  }
  if (size == 1) return;
  for (size_t i = 0; i < missing.size(); ++i) {
    Outcome& reference = reference_cache()[missing[i]];
    const int owner = int(i % size);
    if (owner != rank) {
      reference.losses.resize(steps);
      reference.gradients.resize(num_parameters(config_of(std::get<1>(missing[i]))));
    }
    DeviceBuffer<double> losses(reference.losses);
    DeviceBuffer<float> gradients(reference.gradients);
    NCCL_CHECK(ncclBroadcast(losses.data(), losses.data(), steps, ncclFloat64, owner, groups.world, nullptr));
    NCCL_CHECK(ncclBroadcast(gradients.data(), gradients.data(), gradients.size(), ncclFloat32, owner, groups.world,
                             nullptr));
    reference.losses = losses.to_host();
    reference.gradients = gradients.to_host();
  }
}

inline const Outcome& reference(const Case& c, int steps) {
  return reference_cache().at({c.m * c.dp, c.layers, steps});
}

// The groups of a layout for the length of a test (creation and destruction are collective).
struct WorldGroups {
  explicit WorldGroups(int dp, int pp) {
    groups = create_world_groups(make_mesh(dp, pp, size_of_world(), rank_in_world()));
  }
  ~WorldGroups() { destroy_world_groups(groups); }
  CommGroups groups;
};

// Every case (all of one layout) trained for `steps` clipped steps against the reference: the
// loss of every step, and after step 1 every gradient region the rank owns, bitwise equal
// (relative_tolerance 0: dp = 1), or within relative_tolerance of each step's reference loss
// and of the region's largest reference magnitude (dp > 1, where the replicas' sums are added
// in another order than the single run's microbatch loop).
inline void expect_cases_match(const std::vector<Case>& cases, int steps, double relative_tolerance) {
  WorldGroups world(cases.front().dp, cases.front().pp);
  share_references(cases, steps, world.groups);
  for (const Case& c : cases) {
    SCOPED_TRACE(describe(c));
    const Outcome outcome = run(c, world.groups, steps);
    const Outcome& expected = reference(c, steps);
    trace_check::expect_trace_follows_schedule(outcome.trace, outcome.schedule, c.pp, c.v, world.groups.mesh.pp_rank,
                                               c.recompute, outcome.accounting.slots);
    if (relative_tolerance == 0) {
      EXPECT_EQ(outcome.losses, expected.losses);
    } else {
      for (int i = 0; i < steps; ++i)
        EXPECT_NEAR(outcome.losses[i], expected.losses[i], relative_tolerance * std::fabs(expected.losses[i]))
            << "step " << i + 1;
    }
    for (const ParameterRegion& r : outcome.regions) {
      const float* got = outcome.gradients.data() + r.full_offset;
      const float* want = expected.gradients.data() + r.full_offset;
      float largest = 0, worst = 0;
      for (size_t i = 0; i < r.count; ++i) {
        largest = std::max(largest, std::fabs(want[i]));
        worst = std::max(worst, std::fabs(got[i] - want[i]));
      }
      if (relative_tolerance == 0) {
        EXPECT_TRUE(std::equal(got, got + r.count, want))
            << parameter_tensor_name(r.tensor) << " at " << r.full_offset << " differs by up to " << worst;
      } else {
        EXPECT_LE(worst, relative_tolerance * largest) << parameter_tensor_name(r.tensor) << " at " << r.full_offset;
      }
    }
  }
}

}  // namespace pipeline_harness
