// The warp collectives of the CPU build: shuffles, votes, __syncwarp and cooperative_groups::reduce.
// The lanes of a call's mask meet as the threads of a block meet at a barrier (cpu/launch/block_scheduler.cpp):
// each arriving lane waits until every lane of its mask has arrived, then the last one gives each
// its result.
//
// synccheck, as CUDA requires of every *_sync call: the calling lane is in its own mask; lanes
// that meet (one's mask names the other) call the same collective with the same mask; a lane the
// mask names is present when the others wait for it. A violation fails the block naming the
// lanes, masks and call sites; a lane that waits for lanes that returned is reported when the
// block can go no further.
#include <algorithm>
#include <cstring>
#include <sstream>

#include "cpu/launch/block_scheduler_internal.h"
#include "cpu/check/race_annotations.h"

namespace cpu {

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::shuffle_index: return "__shfl_sync";
    case Collective::shuffle_up: return "__shfl_up_sync";
    case Collective::shuffle_down: return "__shfl_down_sync";
    case Collective::shuffle_xor: return "__shfl_xor_sync";
    case Collective::vote: return "__ballot_sync/__any_sync/__all_sync";
    case Collective::syncwarp: return "__syncwarp";
    case Collective::reduce: return "cooperative_groups::reduce";
  }
  return "?";
}

namespace {

std::string lanes_text(unsigned lanes) {
  std::ostringstream s;
  const char* sep = "";
  for (int l = 0; l < 32; ++l)
    if (lanes >> l & 1u) s << sep << l, sep = ",";
  return s.str();
}

std::string hex(unsigned mask) {
  std::ostringstream s;
  s << "0x" << std::hex << mask;
  return s.str();
}

// "lane 5: __shfl_sync with mask 0xffff at kernels/x.cu:12"
std::string lane_call_text(const Thread& t, int lane) {
  return "lane " + std::to_string(lane) + ": " + collective_name(t.collective) + " with mask " + hex(t.mask) + " at " +
         site_text(t.site);
}

[[noreturn, gnu::cold, gnu::noinline]] void fail_mismatched_collective(Block& b, int warp, const Thread& t, int lane,
                                                                       const Thread& other, int other_lane) {
  fail_in_fiber(b, "lanes of warp " + std::to_string(warp) +
                       " meet in different collectives or with different masks (" + lane_call_text(t, lane) + "; " +
                       lane_call_text(other, other_lane) + ")");
}

[[noreturn, gnu::cold, gnu::noinline]] void fail_bad_collective_call(Block& b, Collective kind, unsigned mask,
                                                                     int width, CallSite site) {
  const int lane = b.current() % 32, warp = b.current() / 32;
  if (!(mask >> lane & 1u))
    fail_in_fiber(b, std::string(collective_name(kind)) + " at " + site_text(site) + " called by lane " +
                         std::to_string(lane) + " of warp " + std::to_string(warp) + " with mask " + hex(mask) +
                         ", which does not include it");
  fail_in_fiber(b, std::string(collective_name(kind)) + " at " + site_text(site) + " with width " +
                       std::to_string(width) + " (must be a power of 2, at most 32)");
}

// An arriving lane against the lanes already waiting in its warp: those it would meet, and those
// that wait for it, must wait with its mask. Fast when all waiting lanes share one mask.
void check_masks(Block& b, int warp, int lane, const Thread& t) {
  WarpWaiting& w = b.warp_waiting[warp];
  const unsigned waiting = b.warp_arrived[warp];
  if (waiting == 0) {
    w.mask = t.mask;
    w.uniform = true;
    return;
  }
  if (w.uniform && w.mask == t.mask) return;
  const Thread* lanes = &b.threads[warp * 32];
  for (unsigned m = waiting; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    const bool meet = (t.mask >> l & 1u) || (lanes[l].mask >> lane & 1u);
    if (meet && lanes[l].mask != t.mask) fail_mismatched_collective(b, warp, t, lane, lanes[l], l);
  }
  w.uniform = false;
}

// The lane whose value lane l of a shuffle receives (l itself where CUDA keeps the caller's).
int shuffle_source(const Thread& t, int l) {
  const int w = t.width, segment = l & ~(w - 1);
  switch (t.collective) {
    case Collective::shuffle_index: return segment + (t.operand & (w - 1));
    case Collective::shuffle_up: return (l - segment) >= t.operand ? l - t.operand : l;
    case Collective::shuffle_down: return (l - segment) + t.operand < w ? l + t.operand : l;
    case Collective::shuffle_xor: {
      const int src = l ^ t.operand;
      return src < segment + w ? src : l;
    }
    default: return l;
  }
}

// A reduce over all 32 lanes, all waiting at it but the caller: the leader's tree combines
// the lanes' values once, and the result is copied to every lane's destination (their
// stacks are intact while they wait).
void finish_reduction(Block& b, const Thread* lanes) {
  const WarpReduction& leader = *lanes[0].reduction;
  const void* values[32];
  for (int l = 0; l < 32; ++l) {
    if (lanes[l].reduction->tree != leader.tree)
      fail_in_fiber(b, "cooperative_groups::reduce: lanes of one warp reduce different types or operations");
    values[l] = lanes[l].reduction->value;
  }
  leader.tree(leader.op, values, leader.result);
  for (int l = 1; l < 32; ++l) std::memcpy(lanes[l].reduction->result, leader.result, leader.bytes);
}

// Gives each lane of a completed collective its result.
void complete_collective(Block& b, int warp, unsigned mask) {
  Thread* lanes = &b.threads[warp * 32];
  const int first = __builtin_ctz(mask);
  const Thread& leader = lanes[first];
  uint64_t ballot = 0;
  for (unsigned m = mask; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    const Thread& t = lanes[l];
    if (t.collective != leader.collective || t.mask != mask) fail_mismatched_collective(b, warp, t, l, leader, first);
    ballot |= uint64_t(t.bits != 0) << l;
    if (racecheck) race_acquire(&b.races.arrive[warp * 32 + l]);
  }
  if (leader.collective == Collective::reduce) finish_reduction(b, lanes);
  const bool shuffle = leader.collective < Collective::vote;
  for (int k = 0; k < 32; ++k) {
    const int l = b.lane_order.empty() ? k : b.lane_order[k];
    if (!(mask >> l & 1u)) continue;
    uint64_t result = ballot;
    if (shuffle) {
      // A source lane outside the mask gives an undefined value in CUDA; here, the caller's own.
      const int src = shuffle_source(lanes[l], l);
      result = (mask >> src & 1u) ? lanes[src].bits : lanes[l].bits;
    }
    release(b, warp * 32 + l, result);
    if (racecheck && warp * 32 + l != b.current()) race_release(&b.races.wake[warp * 32 + l]);
  }
  b.warp_arrived[warp] &= ~mask;
}

uint64_t warp_collective(Collective kind, unsigned mask, uint64_t bits, int operand, int width, CallSite site,
                         const WarpReduction* reduction = nullptr) {
  Block& b = block_of_caller(collective_name(kind));
  const int id = b.current(), warp = id / 32, lane = id % 32;
  if (!(mask >> lane & 1u) || width < 1 || width > 32 || (width & (width - 1)))
    fail_bad_collective_call(b, kind, mask, width, site);
  Thread& t = b.threads[id];
  t.collective = kind;
  t.mask = mask;
  t.bits = bits;
  t.operand = operand;
  t.width = width;
  t.site = site;
  t.reduction = reduction;
  t.wait = Wait::warp;
  check_masks(b, warp, lane, t);
  b.warp_arrived[warp] |= 1u << lane;
  if (racecheck) race_release(&b.races.arrive[id]);
  if ((b.warp_arrived[warp] & mask) == mask) {
    complete_collective(b, warp, mask);
    return t.result;
  }
  suspend(b);
  if (racecheck) race_acquire(&b.races.wake[id]);
  return b.threads[id].result;
}

// Why the lanes that `waiter` waits for have not come, by kind: returned, at a barrier, absent.
std::string missing_lanes_text(const Block& b, int waiter) {
  const Thread& t = b.threads[waiter];
  const int first = waiter / 32 * 32;
  unsigned returned = 0, at_barrier = 0, absent = 0;
  for (int l = 0; l < 32; ++l) {
    if (!(t.mask >> l & 1u)) continue;
    if (first + l >= b.n) absent |= 1u << l;
    else if (b.threads[first + l].wait == Wait::none) returned |= 1u << l;
    else if (b.threads[first + l].wait == Wait::barrier) at_barrier |= 1u << l;
  }
  std::string text;
  const auto add = [&text](unsigned lanes, const std::string& why) {
    if (lanes) text += (text.empty() ? "" : "; ") + ("lanes " + lanes_text(lanes) + " " + why);
  };
  add(returned, "returned");
  add(at_barrier, "wait at __syncthreads at " + site_text(b.barrier_site));
  add(absent, "do not exist");
  return text;
}

}  // namespace

std::string warp_deadlock_report(const Block& b) {
  for (int id = 0; id < b.n; ++id) {
    const Thread& t = b.threads[id];
    if (t.wait != Wait::warp) continue;
    return std::string(collective_name(t.collective)) + " at " + site_text(t.site) + " in warp " +
           std::to_string(id / 32) + " (lane " + std::to_string(id % 32) + ", mask " + hex(t.mask) +
           ") waits for lanes that never come: " + missing_lanes_text(b, id);
  }
  return "";
}

void warp_reduce(const WarpReduction& reduction, CallSite site) {
  warp_collective(Collective::reduce, 0xffffffffu, 0, 0, 32, site, &reduction);
}

uint64_t warp_shuffle(Shuffle kind, unsigned mask, uint64_t bits, int operand, int width, CallSite site) {
  static constexpr Collective kinds[] = {Collective::shuffle_index, Collective::shuffle_up, Collective::shuffle_down,
                                         Collective::shuffle_xor};
  return warp_collective(kinds[int(kind)], mask, bits, operand, width, site);
}

}  // namespace cpu

void __syncwarp(unsigned mask, const char* file, unsigned line) {
  cpu::warp_collective(cpu::Collective::syncwarp, mask, 0, 0, 32, {file, line});
}
unsigned __ballot_sync(unsigned mask, int predicate, const char* file, unsigned line) {
  return unsigned(cpu::warp_collective(cpu::Collective::vote, mask, predicate != 0, 0, 32, {file, line}));
}
int __any_sync(unsigned mask, int predicate, const char* file, unsigned line) {
  return __ballot_sync(mask, predicate, file, line) != 0;
}
int __all_sync(unsigned mask, int predicate, const char* file, unsigned line) {
  return __ballot_sync(mask, predicate, file, line) == mask;
}
unsigned __activemask() {
  cpu::Block& b = cpu::block_of_caller("__activemask");
  const int first = b.current() / 32 * 32, lanes = std::min(32, b.n - first);
  return lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
}
