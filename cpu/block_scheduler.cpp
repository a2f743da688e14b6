// Runs one CUDA block on the CPU: every thread of the block is a fiber (Boost.Context
// fcontext, a few ns per switch), all on the calling OS thread.
//
// Threads that never synchronise cost no fiber of their own: a "runner" fiber calls
// the kernel for one thread after another (a loop instantiated per kernel, with the
// kernel's body inlined: cpu/launch_kernel.h). When the thread it is running blocks
// (__syncthreads, a shuffle, a vote), the runner's fiber becomes that thread's
// fiber, and the threads not yet started get a new runner. So a kernel without
// synchronisation runs as a plain loop, and one that synchronises everywhere ends
// up with one fiber per thread.
//
// Threads start in an order (natural, reversed or shuffled: cpu/settings.h) and run
// until they block; a barrier or warp collective that completes releases its
// waiters to a FIFO run queue. A fiber that blocks or ends switches straight to the
// next ready thread (or starts a runner for threads not yet started): one context
// switch per wait. When nothing can run and threads are left, the block is
// deadlocked (a barrier or collective that some thread never reaches): control goes
// back to BlockRunner::run, which reports it naming the kernel instead of hanging.
#include "cpu/block_scheduler.h"

#include <sys/mman.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "cpu/fiber_sanitizer.h"

namespace fc = boost::context::detail;

namespace cpu {
namespace {

enum class Wait : uint8_t { none, barrier, warp };
enum class Collective : uint8_t { shuffle_index, shuffle_up, shuffle_down, shuffle_xor, vote, syncwarp, reduce };

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

// A fiber's stack. Its top is set back by a different multiple of 64 bytes for each stack:
// page-aligned tops would put the active frames of all fibers in the same few sets of the L1
// cache, so that a warp's 32 lanes switching in turn would miss it at every switch.
struct Stack {
  void* memory = nullptr;  // lowest address, a guard page
  size_t bytes = 0;
  size_t set_back = 0;
  void* top() const { return static_cast<char*>(memory) + bytes - set_back; }
  size_t usable() const { return bytes - 4096 - set_back; }
};

struct Thread {
  fc::fcontext_t context = nullptr;  // where it resumes, while suspended
  int stack = -1;                    // the fiber stack it runs on, once it has waited
  FiberSanitizerState sanitizer;     // its fake stack while suspended (AddressSanitizer)
  Wait wait = Wait::none;
  Collective collective{};
  unsigned mask = 0;
  int operand = 0, width = 32;
  uint64_t bits = 0;    // what it brings to a collective
  uint64_t result = 0;  // what the collective or barrier gives it back
  const WarpReduction* reduction = nullptr;  // in a reduce: its value, result and combining tree
};

struct Block {
  // the launch
  StartThreads start_threads = nullptr;
  const void* call = nullptr;
  dim3 block_dim;
  int n = 0;
  // scheduling
  std::vector<Thread> threads;
  std::vector<int> order;  // start order of threads
  std::vector<int> lane_order;  // order in which a warp's released lanes are queued
  std::vector<int> queue;  // FIFO of ready threads
  size_t queue_head = 0;
  ThreadStarts starts;  // the runners' progress
  fc::fcontext_t scheduler = nullptr;  // BlockRunner::run, waiting for the block to end
  fc::fcontext_t discard = nullptr;    // where a finished fiber's context is "saved"
  FiberSanitizerState scheduler_sanitizer;  // the scheduler's stack, and fake stack while a block runs
  int new_runner_stack = -1;
  int running_stack = -1;  // the stack of the fiber running now
  // barrier and warp collectives in progress
  int barrier_arrived = 0, barrier_true = 0;
  std::vector<unsigned> warp_arrived;
  // fiber stacks, reused across blocks and launches
  std::vector<Stack> stacks;
  std::vector<int> free_stacks;
  size_t stack_bytes = 0;
  std::string error;

  // The running thread, from threadIdx (which the runners' loop sets).
  int current() const { return int((threadIdx.z * block_dim.y + threadIdx.y) * block_dim.x + threadIdx.x); }

  void set_thread_index(int id) {
    if (block_dim.y == 1 && block_dim.z == 1) {  // the common case, without divisions
      threadIdx.x = unsigned(id);
      threadIdx.y = threadIdx.z = 0;
      return;
    }
    threadIdx.x = id % block_dim.x;
    threadIdx.y = (id / block_dim.x) % block_dim.y;
    threadIdx.z = id / (block_dim.x * block_dim.y);
  }
};

thread_local Block* current_block = nullptr;

int take_stack(Block& b) {
  if (b.free_stacks.empty()) {
    const size_t page = 4096;
    Stack s;
    s.bytes = b.stack_bytes + 2 * page;  // the guard page, and room to set the top back
    s.memory = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (s.memory == MAP_FAILED) throw std::runtime_error("cpu: cannot map a fiber stack");
    mprotect(s.memory, page, PROT_NONE);  // an overflow faults instead of corrupting
    s.set_back = b.stacks.size() * 7 % 64 * 64;
    b.stacks.push_back(s);
    return int(b.stacks.size()) - 1;
  }
  int s = b.free_stacks.back();
  b.free_stacks.pop_back();
  return s;
}

void runner(fc::transfer_t from);

// Leaves the running fiber for the next ready thread, else a new runner for the
// threads not yet started, else the scheduler (all done, or deadlocked). The
// fiber's context is saved in *save. Whoever is resumed stores the context of the
// fiber it came from where that fiber asked (the transfer's data).
void switch_to_next(Block& b, fc::fcontext_t* save) {
  fc::fcontext_t target;
  // A fiber that ends (its context "saved" in discard) gives up its fake stack.
  FiberSanitizerState* leaving = save == &b.discard ? nullptr : &b.threads[b.current()].sanitizer;
  if (b.queue_head < b.queue.size()) {
    const int id = b.queue[b.queue_head++];
    b.set_thread_index(id);
    target = b.threads[id].context;
    const Stack& s = b.stacks[b.threads[id].stack];
    sanitizer_start_switch(leaving, s.memory, s.bytes);
  } else if (b.starts.next < b.n) {
    b.new_runner_stack = take_stack(b);
    const Stack& s = b.stacks[b.new_runner_stack];
    target = fc::make_fcontext(s.top(), s.usable(), runner);
    sanitizer_start_new_fiber(leaving, s.memory, s.bytes);
  } else {
    target = b.scheduler;
    sanitizer_start_switch(leaving, b.scheduler_sanitizer.stack_bottom, b.scheduler_sanitizer.stack_bytes);
  }
  fc::transfer_t t = fc::jump_fcontext(target, save);
  sanitizer_finish_switch(leaving);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
  b.running_stack = b.threads[b.current()].stack;  // only a suspended thread is resumed here
}

// From inside a fiber: wait until released.
void suspend(Block& b) {
  ++b.starts.suspensions;
  Thread& t = b.threads[b.current()];
  t.stack = b.running_stack;  // the fiber now belongs to this thread until it ends
  switch_to_next(b, &t.context);
}

// Errors leave the fiber for good. Cold and out of line, so that the frames of the hot
// paths (a shuffle is a few ns) carry no string temporaries.
[[noreturn, gnu::cold, gnu::noinline]] void fail_in_fiber(Block& b, const std::string& what) {
  b.error = what;
  sanitizer_start_switch(nullptr, b.scheduler_sanitizer.stack_bottom, b.scheduler_sanitizer.stack_bytes);
  fc::jump_fcontext(b.scheduler, &b.discard);
  __builtin_unreachable();  // the scheduler abandons this fiber
}

void release(Block& b, int id, uint64_t result) {
  Thread& t = b.threads[id];
  t.result = result;
  t.wait = Wait::none;
  if (id != b.current()) b.queue.push_back(id);
}

// A fiber that starts threads one after another until none are left unstarted.
// When the thread it runs blocks, the fiber stays with that thread; once the
// thread ends, the fiber goes on starting threads.
void runner(fc::transfer_t from) {
  Block& b = *current_block;
  sanitizer_finish_first_switch(b.scheduler_sanitizer);
  *static_cast<fc::fcontext_t*>(from.data) = from.fctx;
  const int my_stack = b.new_runner_stack;
  b.running_stack = my_stack;
  b.start_threads(b.call, b.starts);
  // No thread is left to start, so switch_to_next starts no runner on this stack.
  b.free_stacks.push_back(my_stack);
  switch_to_next(b, &b.discard);
  __builtin_unreachable();
}

std::string lanes_text(unsigned lanes) {
  std::ostringstream s;
  const char* sep = "";
  for (int l = 0; l < 32; ++l)
    if (lanes >> l & 1u) s << sep << l, sep = ",";
  return s.str();
}

std::string deadlock_report(const Block& b) {
  // Every thread has started (the runners start them all before control comes
  // back); those not waiting have finished.
  int at_barrier = 0, finished = 0;
  for (const Thread& t : b.threads) at_barrier += t.wait == Wait::barrier, finished += t.wait == Wait::none;
  std::ostringstream s;
  for (int id = 0; id < b.n; ++id) {
    const Thread& t = b.threads[id];
    if (t.wait != Wait::warp) continue;
    int warp = id / 32, first = warp * 32;
    unsigned missing = 0;
    for (int l = 0; l < 32; ++l)
      if ((t.mask >> l & 1u) && (first + l >= b.n || b.threads[first + l].wait != Wait::warp)) missing |= 1u << l;
    s << collective_name(t.collective) << " in warp " << warp << " (lane " << id % 32 << ", mask 0x" << std::hex
      << t.mask << std::dec << ") waits for lanes " << lanes_text(missing)
      << " that finished, wait at __syncthreads or do not exist";
    return s.str();
  }
  s << "__syncthreads reached by " << at_barrier << " of " << b.n << " threads (" << finished
    << " finished without reaching it)";
  return s.str();
}

}  // namespace

struct BlockRunner::Impl {
  Block block;
};

BlockRunner::BlockRunner(size_t stack_bytes) : impl_(new Impl) { impl_->block.stack_bytes = stack_bytes; }

BlockRunner::~BlockRunner() {
  for (Stack& s : impl_->block.stacks) {
    sanitizer_release_stack(s.memory, s.bytes);
    munmap(s.memory, s.bytes);
  }
}

bool BlockRunner::run(const BlockLaunch& launch, std::string& error) {
  Block& b = impl_->block;
  b.start_threads = launch.start_threads;
  b.call = launch.call;
  b.block_dim = launch.block_dim;
  b.n = int(launch.block_dim.x * launch.block_dim.y * launch.block_dim.z);
  if (int(b.threads.size()) != b.n || !b.error.empty()) b.threads.assign(b.n, Thread{});  // else all are Wait::none
  b.order.clear();
  b.lane_order.clear();
  if (launch.order == ThreadOrder::reverse || launch.order == ThreadOrder::shuffle) {
    b.order.resize(b.n);
    b.lane_order.resize(32);
    for (int i = 0; i < b.n; ++i) b.order[i] = b.n - 1 - i;
    for (int i = 0; i < 32; ++i) b.lane_order[i] = 31 - i;
    if (launch.order == ThreadOrder::shuffle) {
      std::mt19937_64 rng(launch.seed);
      std::shuffle(b.order.begin(), b.order.end(), rng);
      std::shuffle(b.lane_order.begin(), b.lane_order.end(), rng);
    }
  }
  b.queue.clear();
  b.queue_head = 0;
  b.starts = ThreadStarts{0, b.n, b.order.empty() ? nullptr : b.order.data(), b.block_dim, 0};
  b.barrier_arrived = b.barrier_true = 0;
  b.warp_arrived.assign((b.n + 31) / 32, 0u);
  b.error.clear();
  if (b.free_stacks.size() != b.stacks.size()) {  // a failed block left fibers behind
    b.free_stacks.clear();
    for (int s = int(b.stacks.size()) - 1; s >= 0; --s) b.free_stacks.push_back(s);
  }

  current_block = &b;
  b.new_runner_stack = take_stack(b);
  const Stack& first = b.stacks[b.new_runner_stack];
  sanitizer_start_block(b.scheduler_sanitizer, first.memory, first.bytes);
  fc::transfer_t t = fc::jump_fcontext(fc::make_fcontext(first.top(), first.usable(), runner), &b.scheduler);
  sanitizer_finish_switch(&b.scheduler_sanitizer);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
  const bool waiting = b.barrier_arrived > 0 || std::any_of(b.warp_arrived.begin(), b.warp_arrived.end(), [](unsigned w) { return w != 0; });
  if (b.error.empty() && waiting) b.error = deadlock_report(b);
  current_block = nullptr;
  if (b.error.empty()) return true;
  error = "block (" + std::to_string(launch.block_index.x) + "," +
          std::to_string(launch.block_index.y) + "," + std::to_string(launch.block_index.z) + "): " + b.error;
  return false;
}

namespace {

Block& block_of_caller(const char* what) {
  if (!current_block) {
    std::fprintf(stderr, "cpu: %s called outside a kernel\n", what);
    std::abort();
  }
  return *current_block;
}

int block_barrier(int predicate) {
  Block& b = block_of_caller("__syncthreads");
  const int id = b.current();
  ++b.barrier_arrived;
  b.barrier_true += predicate != 0;
  b.threads[id].wait = Wait::barrier;
  if (b.barrier_arrived == b.n) {
    const uint64_t count = uint64_t(b.barrier_true);
    b.barrier_arrived = b.barrier_true = 0;
    for (int k = 0; k < b.n; ++k) {
      int other = b.order.empty() ? k : b.order[k];
      if (b.threads[other].wait == Wait::barrier) release(b, other, count);
    }
    return int(count);
  }
  suspend(b);
  return int(b.threads[id].result);
}

[[noreturn, gnu::cold, gnu::noinline]] void fail_mismatched_collective(Block& b, int warp, unsigned mask,
                                                                       const Thread& t, const Thread& leader) {
  std::ostringstream s;
  s << "warp " << warp << ": lanes of mask 0x" << std::hex << mask << std::dec << " meet in different collectives ("
    << collective_name(t.collective) << " with mask 0x" << std::hex << t.mask << std::dec << " vs "
    << collective_name(leader.collective) << ")";
  fail_in_fiber(b, s.str());
}

[[noreturn, gnu::cold, gnu::noinline]] void fail_bad_collective_call(Block& b, Collective kind, unsigned mask,
                                                                     int width) {
  const int lane = b.current() % 32, warp = b.current() / 32;
  if (!(mask >> lane & 1u))
    fail_in_fiber(b, std::string(collective_name(kind)) + " called by lane " + std::to_string(lane) + " of warp " +
                         std::to_string(warp) + " whose mask does not include it");
  fail_in_fiber(b, std::string(collective_name(kind)) + " with width " + std::to_string(width) +
                       " (must be a power of 2, at most 32)");
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
  const Thread& leader = lanes[__builtin_ctz(mask)];
  uint64_t ballot = 0;
  for (unsigned m = mask; m; m &= m - 1) {
    const int l = __builtin_ctz(m);
    const Thread& t = lanes[l];
    if (t.collective != leader.collective || t.mask != mask) fail_mismatched_collective(b, warp, mask, t, leader);
    ballot |= uint64_t(t.bits != 0) << l;
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
  }
  b.warp_arrived[warp] &= ~mask;
}

uint64_t warp_collective(Collective kind, unsigned mask, uint64_t bits, int operand, int width,
                         const WarpReduction* reduction = nullptr) {
  Block& b = block_of_caller(collective_name(kind));
  const int id = b.current(), warp = id / 32, lane = id % 32;
  if (!(mask >> lane & 1u) || width < 1 || width > 32 || (width & (width - 1)))
    fail_bad_collective_call(b, kind, mask, width);
  Thread& t = b.threads[id];
  t.collective = kind;
  t.mask = mask;
  t.bits = bits;
  t.operand = operand;
  t.width = width;
  t.reduction = reduction;
  t.wait = Wait::warp;
  b.warp_arrived[warp] |= 1u << lane;
  if ((b.warp_arrived[warp] & mask) == mask) {
    complete_collective(b, warp, mask);
    return t.result;
  }
  suspend(b);
  return b.threads[id].result;
}

}  // namespace

thread_local unsigned char* dynamic_shared_memory = nullptr;

void warp_reduce(const WarpReduction& reduction) {
  warp_collective(Collective::reduce, 0xffffffffu, 0, 0, 32, &reduction);
}

uint64_t warp_shuffle(Shuffle kind, unsigned mask, uint64_t bits, int operand, int width) {
  static constexpr Collective kinds[] = {Collective::shuffle_index, Collective::shuffle_up, Collective::shuffle_down,
                                         Collective::shuffle_xor};
  return warp_collective(kinds[int(kind)], mask, bits, operand, width);
}

}  // namespace cpu

void __syncthreads() { cpu::block_barrier(1); }
int __syncthreads_count(int predicate) { return cpu::block_barrier(predicate); }
int __syncthreads_and(int predicate) { return cpu::block_barrier(predicate) == int(blockDim.x * blockDim.y * blockDim.z); }
int __syncthreads_or(int predicate) { return cpu::block_barrier(predicate) != 0; }
void __syncwarp(unsigned mask) { cpu::warp_collective(cpu::Collective::syncwarp, mask, 0, 0, 32); }
unsigned __ballot_sync(unsigned mask, int predicate) {
  return unsigned(cpu::warp_collective(cpu::Collective::vote, mask, predicate != 0, 0, 32));
}
int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
int __all_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) == mask; }
unsigned __activemask() {
  cpu::Block& b = cpu::block_of_caller("__activemask");
  const int first = b.current() / 32 * 32, lanes = std::min(32, b.n - first);
  return lanes == 32 ? 0xffffffffu : (1u << lanes) - 1u;
}
