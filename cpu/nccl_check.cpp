// The collective-matching check of the CPU build's NCCL (cpu/nccl_check.h).
#include "cpu/nccl_check.h"

#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <thread>

namespace cpu {
namespace {

const char* call_name(int32_t call) {
  static const char* names[] = {"ncclSend",      "ncclRecv",      "ncclAllReduce", "ncclReduceScatter",
                                "ncclAllGather", "ncclBroadcast", "ncclReduce"};
  return call >= 0 && call < int32_t(std::size(names)) ? names[call] : "an unknown NCCL call";
}

std::string type_name(int32_t type) {
  switch (type) {
    case ncclInt8: return "ncclInt8";
    case ncclUint8: return "ncclUint8";
    case ncclInt32: return "ncclInt32";
    case ncclUint32: return "ncclUint32";
    case ncclInt64: return "ncclInt64";
    case ncclUint64: return "ncclUint64";
    case ncclFloat16: return "ncclFloat16";
    case ncclFloat32: return "ncclFloat32";
    case ncclFloat64: return "ncclFloat64";
    case ncclBfloat16: return "ncclBfloat16";
    default: return "data type " + std::to_string(type);
  }
}

std::string op_name(int32_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "reduction " + std::to_string(op);
  }
}

bool is_transfer(const NcclSignature& s) {
  return s.call == int32_t(NcclCall::send) || s.call == int32_t(NcclCall::recv);
}

// The ranks a call involves besides the caller's.
std::vector<int> partners(const NcclSignature& s, int size) {
  if (is_transfer(s)) return s.peer == s.rank ? std::vector<int>{} : std::vector<int>{s.peer};
  std::vector<int> ranks;
  for (int r = 0; r < size; ++r)
    if (r != s.rank) ranks.push_back(r);
  return ranks;
}

// The calls that involve `partner`, in the order both sides agree on: collectives in call order,
// then the transfers from the lower rank to the higher, then those the other way, each in call
// order. (A group "send to b, receive from b" on rank a is "receive from a, send to a" on b.)
std::vector<NcclSignature> in_pair_order(const std::vector<NcclSignature>& calls, int partner, int size) {
  std::vector<NcclSignature> collectives, upward, downward;
  for (const NcclSignature& s : calls) {
    const auto involved = partners(s, size);
    if (std::find(involved.begin(), involved.end(), partner) == involved.end()) continue;
    if (!is_transfer(s)) {
      collectives.push_back(s);
      continue;
    }
    const int from = s.call == int32_t(NcclCall::send) ? s.rank : partner;
    (from < (from == s.rank ? partner : s.rank) ? upward : downward).push_back(s);
  }
  collectives.insert(collectives.end(), upward.begin(), upward.end());
  collectives.insert(collectives.end(), downward.begin(), downward.end());
  return collectives;
}

// Whether `mine` and the partner's `theirs` are the two halves of one exchange.
bool match(const NcclSignature& mine, const NcclSignature& theirs) {
  if (mine.count != theirs.count || mine.datatype != theirs.datatype) return false;
  if (is_transfer(mine) || is_transfer(theirs))
    return is_transfer(mine) && is_transfer(theirs) && mine.call != theirs.call && mine.peer == theirs.rank &&
           theirs.peer == mine.rank;
  return mine.call == theirs.call && mine.op == theirs.op && mine.root == theirs.root;
}

// Waits for `request` without holding a core (as cpu/nccl.cpp's waits); false if gave_up.
bool wait(MPI_Request& request, bool (*gave_up)(void*), void* context) {
  auto sleep = std::chrono::microseconds(1);
  for (;;) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return true;
    if (gave_up(context)) return false;
    std::this_thread::sleep_for(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
  }
}

}  // namespace

std::string describe(const NcclSignature& s) {
  std::string text = std::string(call_name(s.call)) + " #" + std::to_string(s.number) + " (";
  if (is_transfer(s)) text += std::string(s.call == int32_t(NcclCall::send) ? "to" : "from") + " rank " +
                              std::to_string(s.peer) + ", ";
  text += "count " + std::to_string(s.count) + ", " + type_name(s.datatype);
  if (s.op >= 0) text += ", " + op_name(s.op);
  if (s.root >= 0) text += ", root " + std::to_string(s.root);
  return text + ")";
}

std::string check_signatures(const std::vector<NcclSignature>& calls, MPI_Comm check, bool (*gave_up)(void*),
                             void* context) {
  if (calls.empty()) return "";
  int size = 0;
  MPI_Comm_size(check, &size);
  const int me = calls.front().rank;
  std::map<int, std::vector<NcclSignature>> mine;  // by partner, in pair order
  for (const NcclSignature& s : calls)
    for (int partner : partners(s, size)) mine.try_emplace(partner, in_pair_order(calls, partner, size));

  // Each side sends its list to the other, then receives the other's, whatever its length.
  std::vector<MPI_Request> sends;
  for (auto& [partner, list] : mine) {
    sends.emplace_back();
    MPI_Isend(list.data(), int(list.size() * sizeof(NcclSignature)), MPI_BYTE, partner, 0, check, &sends.back());
  }
  std::string problem;
  for (auto& [partner, list] : mine) {
    MPI_Message message;
    MPI_Status status;
    for (auto sleep = std::chrono::microseconds(1);;) {
      int arrived = 0;
      MPI_Improbe(partner, 0, check, &arrived, &message, &status);
      if (arrived) break;
      if (gave_up(context)) return "";
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(1000));
    }
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::vector<NcclSignature> theirs(bytes / sizeof(NcclSignature));
    MPI_Mrecv(theirs.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    if (!problem.empty()) continue;
    for (size_t i = 0; i < std::min(list.size(), theirs.size()) && problem.empty(); ++i)
      if (!match(list[i], theirs[i]))
        problem = "rank " + std::to_string(me) + "'s " + describe(list[i]) + " does not match rank " +
                  std::to_string(partner) + "'s " + describe(theirs[i]);
    if (problem.empty() && list.size() != theirs.size())
      problem = "rank " + std::to_string(me) + " made " + std::to_string(list.size()) + " calls involving rank " +
                std::to_string(partner) + " in this group (the first " + describe(list.front()) + "), rank " +
                std::to_string(partner) + " made " + std::to_string(theirs.size()) + " involving rank " +
                std::to_string(me);
  }
  for (MPI_Request& request : sends)
    if (!wait(request, gave_up, context)) return "";
  return problem;
}

}  // namespace cpu
