// The MPI world of the train program (comm/host_exchange.h).
#include "comm/host_exchange.h"

#include <mpi.h>

#include <algorithm>
#include <climits>

namespace {

bool mpi_running() {
  int initialised = 0, finalised = 0;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalised);
  return initialised && !finalised;
}

// MPI counts are ints: large buffers go in pieces.
constexpr size_t kPiece = INT_MAX / 2;

// A host buffer from world rank `from` to world rank `to` (blocking).
void send_floats(const float* values, size_t count, int to) {
  for (size_t done = 0; done < count; done += kPiece)
    MPI_Send(values + done, int(std::min(kPiece, count - done)), MPI_FLOAT, to, 0, MPI_COMM_WORLD);
}

void receive_floats(float* values, size_t count, int from) {
  for (size_t done = 0; done < count; done += kPiece)
    MPI_Recv(values + done, int(std::min(kPiece, count - done)), MPI_FLOAT, from, 0, MPI_COMM_WORLD,
             MPI_STATUS_IGNORE);
}

}  // namespace

World this_world() {
  World world{1, 0};
  if (!mpi_running()) return world;
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  return world;
}

CommGroups create_world_groups(const Mesh& mesh) {
  if (mesh.world_size > 1) return create_comm_groups(mesh);
  return CommGroups{mesh, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr};
}

void destroy_world_groups(CommGroups& groups) {
  if (groups.mesh.world_size > 1) destroy_comm_groups(groups);
}

void abort_world_groups(CommGroups& groups) {
  if (groups.mesh.world_size > 1) abort_comm_groups(groups);
}

void sum_over_world(const World& world, double* values, size_t count) {
  if (world.size == 1) return;
  for (size_t done = 0; done < count; done += kPiece)
    MPI_Allreduce(MPI_IN_PLACE, values + done, int(std::min(kPiece, count - done)), MPI_DOUBLE, MPI_SUM,
                  MPI_COMM_WORLD);
}

void sum_over_world(const World& world, float* values, size_t count) {
  if (world.size == 1) return;
  for (size_t done = 0; done < count; done += kPiece)
    MPI_Allreduce(MPI_IN_PLACE, values + done, int(std::min(kPiece, count - done)), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
}

std::vector<double> gather_to_rank0(const World& world, const double* values, size_t count) {
  if (world.size == 1) return std::vector<double>(values, values + count);
  std::vector<double> all(world.rank == 0 ? count * world.size : 0);
  MPI_Gather(values, int(count), MPI_DOUBLE, all.data(), int(count), MPI_DOUBLE, 0, MPI_COMM_WORLD);
  return all;
}

std::vector<std::string> gather_text_to_rank0(const World& world, const std::string& text) {
  if (world.size == 1) return {text};
  const int length = int(text.size());
  std::vector<int> lengths(world.rank == 0 ? world.size : 0), offsets(lengths.size());
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  int total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::vector<char> all(total);
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, MPI_COMM_WORLD);
  std::vector<std::string> texts;
  for (size_t r = 0; r < lengths.size(); ++r) texts.emplace_back(all.data() + offsets[r], lengths[r]);
  return texts;
}

void wait_for_world(const World& world) {
  if (world.size > 1) MPI_Barrier(MPI_COMM_WORLD);
}

namespace {

// Member `self` of a group of `members` ranks (world rank rank_of(i) for member i): members
// i > 0 send their values at spans[i], which member 0 writes into its own values at the same places.
template <typename RankOf>
void gather_spans_to_member_0(int self, int members, RankOf rank_of, std::vector<float>& values,
                              const std::vector<std::vector<HostSpan>>& spans) {
  if (self > 0) {
    std::vector<float> packed;
    for (const HostSpan& s : spans[self])
      packed.insert(packed.end(), values.begin() + s.offset, values.begin() + s.offset + s.count);
    send_floats(packed.data(), packed.size(), rank_of(0));
    return;
  }
  for (int member = 1; member < members; ++member) {
    size_t total = 0;
    for (const HostSpan& s : spans[member]) total += s.count;
    std::vector<float> packed(total);
    receive_floats(packed.data(), total, rank_of(member));
    size_t at = 0;
    for (const HostSpan& s : spans[member]) {
      std::copy(packed.begin() + at, packed.begin() + at + s.count, values.begin() + s.offset);
      at += s.count;
    }
  }
}

}  // namespace

void gather_spans_to_first_stage(const Mesh& mesh, std::vector<float>& values,
                                 const std::vector<std::vector<HostSpan>>& spans_of_stage) {
  if (mesh.pp == 1 || mesh.dp_rank != 0) return;
  gather_spans_to_member_0(mesh.pp_rank, mesh.pp, [&](int stage) { return world_rank_of(mesh, 0, stage); }, values,
                           spans_of_stage);
}

void gather_spans_to_first_tp_rank(const Mesh& mesh, std::vector<float>& values,
                                   const std::vector<std::vector<HostSpan>>& spans_of_tp_rank) {
  if (mesh.tp == 1 || mesh.dp_rank != 0) return;
  gather_spans_to_member_0(mesh.tp_rank, mesh.tp, [&](int tp_rank) { return world_rank_of(mesh, 0, mesh.pp_rank, tp_rank); },
                           values, spans_of_tp_rank);
}

void gather_spans_to_first_replica(const Mesh& mesh, std::vector<float>& values,
                                   const std::vector<std::vector<HostSpan>>& spans_of_replica) {
  if (mesh.dp == 1) return;
  gather_spans_to_member_0(mesh.dp_rank, mesh.dp, [&](int replica) { return world_rank_of(mesh, replica, mesh.pp_rank, mesh.tp_rank); },
                           values, spans_of_replica);
}
