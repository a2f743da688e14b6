// comm/: the mesh's rank layout and its errors, the NCCL groups' members, point-to-point
// transfers along the pipeline (including the two-stage crossing that would deadlock
// without grouping), and the step's collectives. Run under mpirun -np 4; the layouts
// (dp, pp) = (1, 4), (2, 2), (4, 1) are the ways to cut 4 ranks. Every value moved or
// added here is exact in float (labels, small integers), so results are compared bitwise.
#include <gtest/gtest.h>
#include <mpi.h>
#include <nccl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "comm/collectives.h"
#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/nccl_check.cuh"
#include "comm/p2p.h"
#include "kernels/global_norm.cuh"
#include "model/norm_slots.h"
#include "model/parameters.h"
#include "tests/device_buffer.h"

namespace {

struct Layout {
  int dp, pp;
};
constexpr Layout kLayouts[] = {{1, 4}, {2, 2}, {4, 1}};
constexpr int kWorld = 4;
const cudaStream_t kStream = nullptr;

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

// The groups of a layout for the length of a test (creation and destruction are collective).
struct Groups {
  explicit Groups(Layout layout) : groups(create_comm_groups(make_world_mesh(layout.dp, layout.pp))) {}
  ~Groups() { destroy_comm_groups(groups); }
  CommGroups groups;
};

std::string message_of(int dp, int pp, int world_size) {
  try {
    make_mesh(dp, pp, world_size, 0);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "no error";
}

// A label of (replica, message, index), exact in float.
float label(int dp_rank, int message, size_t i) { return float(dp_rank * 1000000 + message * 100000 + int(i)); }
std::vector<float> labels(int dp_rank, int message, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = label(dp_rank, message, i);
  return values;
}

// ---- Mesh ----

// Expected (dp_rank, pp_rank, previous_stage, next_stage) of world ranks 0..3, written out.
struct Place {
  int dp_rank, pp_rank, previous_stage, next_stage;
};
void expect_places(Layout layout, const std::vector<Place>& places) {
  for (int rank = 0; rank < kWorld; ++rank) {
    const Mesh mesh = make_mesh(layout.dp, layout.pp, kWorld, rank);
    const Place& place = places[rank];
    EXPECT_EQ(mesh.dp_rank, place.dp_rank) << "rank " << rank;
    EXPECT_EQ(mesh.pp_rank, place.pp_rank) << "rank " << rank;
    EXPECT_EQ(mesh.previous_stage, place.previous_stage) << "rank " << rank;
    EXPECT_EQ(mesh.next_stage, place.next_stage) << "rank " << rank;
    EXPECT_EQ(mesh.is_first_stage(), place.previous_stage == -1) << "rank " << rank;
    EXPECT_EQ(mesh.is_last_stage(), place.next_stage == -1) << "rank " << rank;
    EXPECT_EQ(world_rank_of(mesh, place.dp_rank, place.pp_rank), rank);
  }
}

TEST(Mesh, OneByFourIsOnePipelineOfConsecutiveRanks) {
  expect_places({1, 4}, {{0, 0, -1, 1}, {0, 1, 0, 2}, {0, 2, 1, 3}, {0, 3, 2, -1}});
}

TEST(Mesh, TwoByTwoIsTwoPipelinesOfConsecutiveRanks) {
  expect_places({2, 2}, {{0, 0, -1, 1}, {0, 1, 0, -1}, {1, 0, -1, 1}, {1, 1, 0, -1}});
}

TEST(Mesh, FourByOneIsFourSingleStageReplicas) {
  expect_places({4, 1}, {{0, 0, -1, -1}, {1, 0, -1, -1}, {2, 0, -1, -1}, {3, 0, -1, -1}});
}

TEST(Mesh, PpZeroIsWorldSizeOverDp) {
  EXPECT_EQ(make_mesh(1, 0, kWorld, 0).pp, 4);
  EXPECT_EQ(make_mesh(2, 0, kWorld, 0).pp, 2);
  EXPECT_EQ(make_mesh(4, 0, kWorld, 0).pp, 1);
}

TEST(Mesh, BadLayoutsThrowTheirMessage) {
  EXPECT_EQ(message_of(3, 2, 4), "--dp 3 x --pp 2 = 6 does not equal the world size 4");
  EXPECT_EQ(message_of(1, 2, 4), "--dp 1 x --pp 2 = 2 does not equal the world size 4");
  EXPECT_EQ(message_of(0, 4, 4), "--dp 0 must be at least 1");
  EXPECT_EQ(message_of(1, -1, 4), "--pp -1 must be at least 1 (or 0: world size / dp)");
  EXPECT_EQ(message_of(3, 0, 4), "--dp 3 does not divide the world size 4");
}

// Each rank validates by itself, so a bad layout fails everywhere without communication:
// if make_world_mesh waited for other ranks, a rank that skipped it would hang this test.
TEST(Mesh, ErrorIsThrownOnEveryRankWithoutCommunication) {
  int threw = 0;
  try {
    make_world_mesh(3, 2);
  } catch (const std::runtime_error&) {
    threw = 1;
  }
  int ranks_that_threw = 0;
  MPI_Allreduce(&threw, &ranks_that_threw, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  EXPECT_EQ(ranks_that_threw, kWorld);
}

// A group's members, as a one-hot vector of world ranks summed over the group.
std::vector<int> members_of(ncclComm_t comm) {
  std::vector<int> one_hot(kWorld, 0);
  one_hot[world_rank()] = 1;
  DeviceBuffer<int> buffer(one_hot);
  NCCL_CHECK(ncclAllReduce(buffer.data(), buffer.data(), kWorld, ncclInt32, ncclSum, comm, kStream));
  return buffer.to_host();
}

void expect_group(ncclComm_t comm, int size, int rank, const std::vector<int>& members, const char* name) {
  ASSERT_NE(comm, nullptr) << name;
  int count = 0, user_rank = 0;
  NCCL_CHECK(ncclCommCount(comm, &count));
  NCCL_CHECK(ncclCommUserRank(comm, &user_rank));
  EXPECT_EQ(count, size) << name;
  EXPECT_EQ(user_rank, rank) << name;
  EXPECT_EQ(members_of(comm), members) << name;
}

TEST(Mesh, GroupsHaveTheLayoutsMembers) {
  const int r = world_rank();
  {  // (1, 4): one pipeline 0 1 2 3; each stage its own replica group; embedding {0, 3}.
    Groups g({1, 4});
    expect_group(g.groups.world, 4, r, {1, 1, 1, 1}, "world");
    expect_group(g.groups.pipeline, 4, r, {1, 1, 1, 1}, "pipeline");
    std::vector<int> self(kWorld, 0);
    self[r] = 1;
    expect_group(g.groups.data_parallel, 1, 0, self, "data_parallel");
    if (r == 0 || r == 3) expect_group(g.groups.embedding, 2, r == 0 ? 0 : 1, {1, 0, 0, 1}, "embedding");
    else EXPECT_EQ(g.groups.embedding, nullptr);
  }
  {  // (2, 2): pipelines {0, 1} and {2, 3}; replicas {0, 2} and {1, 3}; embedding = pipeline.
    Groups g({2, 2});
    const std::vector<int> pipeline = r < 2 ? std::vector<int>{1, 1, 0, 0} : std::vector<int>{0, 0, 1, 1};
    const std::vector<int> replicas = r % 2 == 0 ? std::vector<int>{1, 0, 1, 0} : std::vector<int>{0, 1, 0, 1};
    expect_group(g.groups.pipeline, 2, r % 2, pipeline, "pipeline");
    expect_group(g.groups.data_parallel, 2, r / 2, replicas, "data_parallel");
    expect_group(g.groups.embedding, 2, r % 2, pipeline, "embedding");
  }
  {  // (4, 1): single-stage pipelines; one replica group of all; no embedding group.
    Groups g({4, 1});
    std::vector<int> self(kWorld, 0);
    self[r] = 1;
    expect_group(g.groups.pipeline, 1, 0, self, "pipeline");
    expect_group(g.groups.data_parallel, 4, r, {1, 1, 1, 1}, "data_parallel");
    EXPECT_EQ(g.groups.embedding, nullptr);
  }
}

// ---- P2P ----

// A message goes forward through every stage, each adding 1 to every element; then a
// gradient goes back, each stage adding 10. Runs on (1, 4) and on (2, 2), where the
// replica's label shows that the two pipelines' messages do not mix.
TEST(P2P, ForwardThroughTheStagesAndGradientsBack) {
  const size_t n = 1000;
  for (Layout layout : {Layout{1, 4}, Layout{2, 2}}) {
    Groups g(layout);
    const Mesh& mesh = g.groups.mesh;
    DeviceBuffer<float> activation(labels(mesh.dp_rank, 0, n)), gradient(labels(mesh.dp_rank, 1, n));
    if (!mesh.is_first_stage()) recv_forward(g.groups, activation.data(), n, ncclFloat32, kStream);
    std::vector<float> received = activation.to_host();
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(received[i], label(mesh.dp_rank, 0, i) + mesh.pp_rank) << i;
    for (float& x : received) x += 1;
    activation.upload(received);
    if (!mesh.is_last_stage()) send_forward(g.groups, activation.data(), n, ncclFloat32, kStream);

    if (!mesh.is_last_stage()) recv_backward(g.groups, gradient.data(), n, ncclFloat32, kStream);
    received = gradient.to_host();
    const int stages_after = layout.pp - 1 - mesh.pp_rank;
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(received[i], label(mesh.dp_rank, 1, i) + 10 * stages_after) << i;
    for (float& x : received) x += 10;
    gradient.upload(received);
    if (!mesh.is_first_stage()) send_backward(g.groups, gradient.data(), n, ncclFloat32, kStream);
  }
}

// 1F1B's steady state on two stages: stage 0 sends the activation of microbatch 1 while
// stage 1 sends the gradient of microbatch 0, both first, before either receives. The
// messages (100k floats, 400 kB) are far above MPI's and NCCL's eager sizes, so as
// separate blocking send-then-receive calls both ranks would wait for each other forever.
TEST(P2P, TwoStageCrossingWithCombinedCallsCompletes) {
  const size_t n = 100000;
  Groups g({2, 2});
  const Mesh& mesh = g.groups.mesh;
  if (mesh.is_first_stage()) {
    DeviceBuffer<float> activation1(labels(mesh.dp_rank, 1, n)), gradient0(n);
    send_forward_recv_backward(g.groups, activation1.data(), gradient0.data(), n, ncclFloat32, kStream);
    EXPECT_EQ(gradient0.to_host(), labels(mesh.dp_rank, 5, n));
  } else {
    DeviceBuffer<float> gradient0(labels(mesh.dp_rank, 5, n)), activation1(n);
    send_backward_recv_forward(g.groups, gradient0.data(), activation1.data(), n, ncclFloat32, kStream);
    EXPECT_EQ(activation1.to_host(), labels(mesh.dp_rank, 1, n));
  }
}

// The interleaved schedule passes chunk c's output of the last stage to chunk c + 1 on stage 0.
TEST(P2P, LastStageSendsForwardToTheFirstStage) {
  const size_t n = 100;
  Groups g({1, 4});
  const Mesh& mesh = g.groups.mesh;
  if (mesh.is_last_stage()) {
    DeviceBuffer<float> activation(labels(0, 7, n));
    send_forward(g.groups, activation.data(), n, ncclFloat32, kStream);
  } else if (mesh.is_first_stage()) {
    DeviceBuffer<float> activation(n);
    recv_forward(g.groups, activation.data(), n, ncclFloat32, kStream);
    EXPECT_EQ(activation.to_host(), labels(0, 7, n));
  }
}

TEST(P2P, WarmUpHearsEachNeighbour) {
  for (Layout layout : kLayouts) {
    Groups g(layout);
    EXPECT_NO_THROW(warm_up_neighbours(g.groups, kStream)) << layout.dp << " x " << layout.pp;
  }
}

TEST(P2P, SingleStageHasNoNeighbour) {
  Groups g({4, 1});
  DeviceBuffer<float> buffer(1);
  EXPECT_THROW(send_forward(g.groups, buffer.data(), 1, ncclFloat32, kStream), std::runtime_error);
  EXPECT_THROW(recv_backward(g.groups, buffer.data(), 1, ncclFloat32, kStream), std::runtime_error);
}

// ---- Collectives ----

// Rank r's gradient element i: (r + 1) * (i + 1) / 2, exact in float, as are all sums here.
std::vector<float> gradient_of(int rank, size_t count) {
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) values[i] = float((rank + 1) * (int(i) + 1)) * 0.5f;
  return values;
}

TEST(Collectives, DataParallelAllReduceSumsTheStagesReplicas) {
  const size_t n = 777;
  for (Layout layout : kLayouts) {
    Groups g(layout);
    const Mesh& mesh = g.groups.mesh;
    DeviceBuffer<float> gradients(gradient_of(mesh.world_rank, n));
    allreduce_data_parallel_gradients(g.groups, gradients.data(), n, ncclFloat32, kStream);
    std::vector<float> expected(n, 0.0f);
    for (int d = 0; d < layout.dp; ++d) {
      const std::vector<float> replica = gradient_of(d * layout.pp + mesh.pp_rank, n);
      for (size_t i = 0; i < n; ++i) expected[i] += replica[i];
    }
    EXPECT_EQ(gradients.to_host(), expected) << layout.dp << " x " << layout.pp;
  }
}

TEST(Collectives, TiedEmbeddingAllReduceJoinsOnlyFirstAndLastStage) {
  const size_t n = 300;
  for (Layout layout : kLayouts) {
    Groups g(layout);
    const Mesh& mesh = g.groups.mesh;
    DeviceBuffer<float> grad_wte(gradient_of(mesh.world_rank, n));
    allreduce_tied_embedding_gradient(g.groups, grad_wte.data(), n, ncclFloat32, kStream);
    std::vector<float> expected = gradient_of(mesh.world_rank, n);
    const bool joins = layout.pp > 1 && (mesh.is_first_stage() || mesh.is_last_stage());
    if (joins) {
      const std::vector<float> first = gradient_of(mesh.dp_rank * layout.pp, n);
      const std::vector<float> last = gradient_of(mesh.dp_rank * layout.pp + layout.pp - 1, n);
      for (size_t i = 0; i < n; ++i) expected[i] = first[i] + last[i];
    }
    EXPECT_EQ(grad_wte.to_host(), expected) << layout.dp << " x " << layout.pp << " rank " << mesh.world_rank;
  }
}

TEST(Collectives, NormSlotsAreInGlobalLayerOrder) {
  const int L = 3;
  EXPECT_EQ(norm_slot_count(L), 40u);
  EXPECT_EQ(norm_slot(kWte, 0, L), 0u);
  EXPECT_EQ(norm_slot(kWpe, 0, L), 1u);
  EXPECT_EQ(norm_slot(kLn1w, 0, L), 2u);
  EXPECT_EQ(norm_slot(kFcprojb, 0, L), 13u);
  EXPECT_EQ(norm_slot(kLn1w, 1, L), 14u);
  EXPECT_EQ(norm_slot(kFcprojb, 2, L), 37u);
  EXPECT_EQ(norm_slot(kLnfw, 0, L), 38u);
  EXPECT_EQ(norm_slot(kLnfb, 0, L), 39u);
  EXPECT_THROW(norm_slot(kQkvw, 3, L), std::runtime_error);
  // Stages [0, 1) + embedding, [1, 1), [1, 3) + head tile the table in order.
  const NormSlotRange first = norm_slots_of_stage(L, 0, 1, true, false);
  const NormSlotRange middle = norm_slots_of_stage(L, 1, 1, false, false);
  const NormSlotRange last = norm_slots_of_stage(L, 1, 3, false, true);
  EXPECT_EQ(first.first, 0u);
  EXPECT_EQ(first.end, 14u);
  EXPECT_EQ(middle.first, 14u);
  EXPECT_EQ(middle.end, 14u);
  EXPECT_EQ(last.first, 14u);
  EXPECT_EQ(last.end, 40u);
}

// Squared-norm partials whose float sum depends on the order of addition: large values
// (ulp 2 at 2^24..2^25) among small fractional ones, which a different grouping rounds away
// differently.
std::vector<float> norm_partials(size_t slots) {
  std::vector<float> values(slots);
  for (size_t s = 0; s < slots; ++s) values[s] = s % 7 == 3 ? 2.0e7f + float(s) : 0.3f + 0.011f * float(s);
  return values;
}

// Each stage fills only its slots; after the gather every stage holds the whole table and
// the total that one process summing the whole table gets, bitwise.
TEST(Collectives, GatheredNormTotalIsBitwiseTheSameForEveryLayout) {
  const int L = 8;
  const size_t slots = norm_slot_count(L);
  const std::vector<float> table = norm_partials(slots);
  DeviceBuffer<float> whole(table), single_process_total(1);
  sum_rows_in_fixed_order(single_process_total.data(), whole.data(), 1, slots, kStream);
  const float expected_total = single_process_total.to_host()[0];

  // The values are order-sensitive: summing per stage of (1, 4) first, then the stages,
  // differs from summing the table in slot order.
  float in_order = 0.0f, by_stage = 0.0f;
  for (float x : table) in_order += x;
  for (int s = 0; s < 4; ++s) {
    const NormSlotRange own = norm_slots_of_stage(L, 2 * s, 2 * s + 2, s == 0, s == 3);
    float stage_sum = 0.0f;
    for (size_t i = own.first; i < own.end; ++i) stage_sum += table[i];
    by_stage += stage_sum;
  }
  ASSERT_NE(in_order, by_stage);

  for (Layout layout : kLayouts) {
    Groups g(layout);
    const Mesh& mesh = g.groups.mesh;
    const int layers_per_stage = L / layout.pp;
    const NormSlotRange own =
        norm_slots_of_stage(L, mesh.pp_rank * layers_per_stage, (mesh.pp_rank + 1) * layers_per_stage,
                            mesh.is_first_stage(), mesh.is_last_stage());
    std::vector<float> mine(slots, -1.0f);  // slots not this stage's hold garbage
    for (size_t s = own.first; s < own.end; ++s) mine[s] = table[s];
    DeviceBuffer<float> partials(mine), total(1);
    gather_layer_norm_partials(g.groups, partials.data(), slots, own, total.data(), kStream);
    EXPECT_EQ(partials.to_host(), table) << layout.dp << " x " << layout.pp;
    const float gathered_total = total.to_host()[0];
    EXPECT_EQ(std::memcmp(&gathered_total, &expected_total, sizeof(float)), 0)
        << layout.dp << " x " << layout.pp << ": " << gathered_total << " vs " << expected_total;
  }
}

}  // namespace
