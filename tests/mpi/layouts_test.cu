// The pipeline engine's equivalence on every layout of the world it runs in (tools/run_tests.sh
// runs this suite under mpirun -np 2, 4 and 8): each (dp, pp) with dp, pp in {1, 2, 4} and
// dp * pp = the world size, i.e. (1, 2), (2, 1); (1, 4), (2, 2), (4, 1); (2, 4), (4, 2), with
// each schedule, recompute off and on and m in {1, 3, 8} where the schedule allows it, trains
// five clipped steps of the single-stage run of the same global batch (m * dp microbatches):
// the same loss curve and, after step 1, the same gradients. Bitwise without data parallelism
// (the same additions in the same order on any cut of the model: gpt.cuh's layer ranges, the
// tied embedding's two shares added once, the norm from slot partials), within 1e-6 with
// replicas. No cell is left out for time: the suite takes about 6, 37 and 25 s at 2, 4 and 8
// ranks in the CPU build on 2 cores.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "tests/mpi/pipeline_harness.h"

namespace {

using namespace pipeline_harness;

constexpr int kSteps = 5;

// fp32 gradients summed over 2 or 4 replicas in another association than the single run's
// microbatch loop: a few roundings of 6e-8 each, bounded by 1e-6 of the tensor's largest entry
// (2.7e-7 at most, measured with 4 replicas); through five AdamW steps the losses differ by less
// than 1e-8 relative, well inside 1e-6.
double tolerance_of(int dp) { return dp == 1 ? 0.0 : 1e-6; }

// The schedule's cases on the layout: recompute off and on, m in {1, 3, 8}. The interleaved
// schedule (v = 2) needs m a multiple of pp and 2 pp chunks of layers: the 4-layer model up to
// 2 stages, 8 layers on 4 (where only m = 8 fits).
std::vector<Case> cases_of(ScheduleKind schedule, int dp, int pp) {
  const bool interleaved = schedule == ScheduleKind::interleaved;
  std::vector<Case> cases;
  for (int m : {1, 3, 8})
    for (bool recompute : {false, true})
      if (!interleaved || m % pp == 0)
        cases.push_back({dp, pp, schedule, interleaved ? 2 : 1, recompute, m, interleaved ? std::max(4, 2 * pp) : 4});
  return cases;
}

void expect_every_layout_matches(ScheduleKind schedule) {
  std::vector<std::pair<int, int>> layouts;
  for (int dp : {1, 2, 4})
    for (int pp : {1, 2, 4})
      if (dp * pp == size_of_world()) layouts.push_back({dp, pp});
  ASSERT_FALSE(layouts.empty()) << "no layout of dp, pp in {1, 2, 4} for " << size_of_world() << " ranks";
  for (const auto& [dp, pp] : layouts) expect_cases_match(cases_of(schedule, dp, pp), kSteps, tolerance_of(dp));
}

}  // namespace

TEST(PipelineLayouts, AfabGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::afab); }
TEST(PipelineLayouts, OneFOneBGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::one_f_one_b); }
TEST(PipelineLayouts, InterleavedGivesTheSingleStageRun) { expect_every_layout_matches(ScheduleKind::interleaved); }
