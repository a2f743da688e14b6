// The collective-matching check of the CPU build's NCCL (cpu/nccl/nccl_call_matching.h). A call meets each
// partner's first call of its channel not yet met, which is how NCCL pairs them; a rank sends each
// operation's calls to each partner in one message, in the order its stream runs them.
#include "cpu/nccl/nccl_call_matching.h"

#include <nccl.h>

#include <algorithm>

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

// 0 for a collective; for a transfer, 1 + (from, to) of the data, the same on both sides.
int64_t channel_of(const NcclSignature& s, int size) {
  if (!is_transfer(s)) return 0;
  const bool send = s.call == int32_t(NcclCall::send);
  const int64_t from = send ? s.rank : s.peer, to = send ? s.peer : s.rank;
  return 1 + from * size + to;
}

// Whether a call and the partner's call of the same channel are the two halves of one exchange.
bool match(const NcclSignature& mine, const NcclSignature& theirs) {
  if (mine.count != theirs.count || mine.datatype != theirs.datatype) return false;
  return is_transfer(mine) || (mine.call == theirs.call && mine.op == theirs.op && mine.root == theirs.root);
}

std::string rank_call(const NcclSignature& s) { return "rank " + std::to_string(s.rank) + "'s " + describe(s); }

}  // namespace

NcclSignature nccl_signature(NcclCall call, int datatype, size_t count, int op, int root, int peer) {
  return NcclSignature{int32_t(call), datatype, op, root, peer, 0, int64_t(count), 0};
}

std::string describe(const NcclSignature& s) {
  std::string text = std::string(call_name(s.call)) + " #" + std::to_string(s.number) + " (";
  if (is_transfer(s))
    text += std::string(s.call == int32_t(NcclCall::send) ? "to" : "from") + " rank " + std::to_string(s.peer) + ", ";
  text += "count " + std::to_string(s.count) + ", " + type_name(s.datatype);
  if (s.op >= 0) text += ", " + op_name(s.op);
  if (s.root >= 0) text += ", root " + std::to_string(s.root);
  return text + ")";
}

NcclMatcher::NcclMatcher(MPI_Comm check) : comm_(check) { MPI_Comm_size(comm_, &size_); }

int64_t NcclMatcher::channel(const NcclSignature& call) const { return channel_of(call, size_); }

std::vector<NcclMeeting> NcclMatcher::announce(const std::vector<NcclSignature>& calls) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::map<int, std::vector<NcclSignature>> by_partner;
  std::vector<NcclMeeting> meetings;
  for (const NcclSignature& s : calls) {
    meetings.push_back({s, partners(s, size_)});
    for (int partner : meetings.back().partners) by_partner[partner].push_back(s);
  }
  for (auto& [partner, list] : by_partner) {
    Outgoing& out = outgoing_.emplace_back(Outgoing{std::move(list), MPI_REQUEST_NULL});
    MPI_Isend(out.calls.data(), int(out.calls.size() * sizeof(NcclSignature)), MPI_BYTE, partner, 0, comm_,
              &out.request);
  }
  return meetings;
}

std::string NcclMatcher::meet(NcclMeeting& meeting) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string problem;
  const int64_t own = channel_of(meeting.call, size_);
  std::erase_if(meeting.partners, [&](int partner) {
    std::deque<NcclSignature>& theirs = unmatched_[partner];
    const auto met = std::find_if(theirs.begin(), theirs.end(),
                                  [&](const NcclSignature& s) { return channel_of(s, size_) == own; });
    if (met == theirs.end()) return false;
    if (problem.empty() && !match(meeting.call, *met))
      problem = rank_call(meeting.call) + " does not match " + rank_call(*met);
    theirs.erase(met);
    return true;
  });
  return problem;
}

bool NcclMatcher::receive() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::erase_if(outgoing_, [](Outgoing& out) {
    int sent = 0;
    MPI_Test(&out.request, &sent, MPI_STATUS_IGNORE);
    return sent != 0;
  });
  bool any = false;
  for (;;) {
    MPI_Message message;
    MPI_Status status;
    int arrived = 0;
    MPI_Improbe(MPI_ANY_SOURCE, 0, comm_, &arrived, &message, &status);
    if (!arrived) return any;
    int bytes = 0;
    MPI_Get_count(&status, MPI_BYTE, &bytes);
    std::vector<NcclSignature> received(bytes / sizeof(NcclSignature));
    MPI_Mrecv(received.data(), bytes, MPI_BYTE, &message, MPI_STATUS_IGNORE);
    std::deque<NcclSignature>& theirs = unmatched_[status.MPI_SOURCE];
    theirs.insert(theirs.end(), received.begin(), received.end());
    any = true;
  }
}

}  // namespace cpu
