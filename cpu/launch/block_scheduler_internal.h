// The state of one CUDA block while it runs, shared by the block scheduler (cpu/launch/block_scheduler.cpp:
// fibers, __syncthreads) and the warp collectives (cpu/launch/warp_collectives.cpp). Internal to those two.
#pragma once
#include <boost/context/detail/fcontext.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "cpu/launch/block_scheduler.h"
#include "cpu/check/fiber_sanitizer.h"
#include "cpu/launch/thread_starts.h"
#include "cpu/check/race_annotations.h"

namespace cpu {

enum class Wait : uint8_t { none, barrier, warp };
enum class Collective : uint8_t { shuffle_index, shuffle_up, shuffle_down, shuffle_xor, vote, syncwarp, reduce };
const char* collective_name(Collective c);

struct Thread {
  boost::context::detail::fcontext_t context = nullptr;  // where it resumes, while suspended
  int stack = -1;                                         // the fiber stack it runs on, once it has waited
  FiberSanitizerState sanitizer;  // its fake stack while suspended (AddressSanitizer)
  Wait wait = Wait::none;
  Collective collective{};
  unsigned mask = 0;
  int operand = 0, width = 32;
  CallSite site;        // of the collective it waits at (synccheck; a barrier's is the block's)
  uint64_t bits = 0;    // what it brings to a collective
  uint64_t result = 0;  // what the collective or barrier gives it back
  const WarpReduction* reduction = nullptr;  // in a reduce: its value, result and combining tree
};

// The lanes of a warp waiting in collectives: when `uniform`, all with `mask`.
struct WarpWaiting {
  unsigned mask = 0;
  bool uniform = true;
};

// What `make racecheck` keeps per block (cpu/launch/race_fibers.cpp); empty otherwise.
struct BlockRaces {
  std::vector<RaceThread> threads;  // each CUDA thread's fiber and stack
  void* scheduler = nullptr;        // BlockRunner::run's fiber
  std::vector<uint64_t> arrive;     // per thread: released when it arrives at a warp collective
  std::vector<uint64_t> wake;       // per thread: released for it when its collective completes
  std::vector<uint64_t> barriers;   // __syncthreads': one object for even barriers, one for odd
  std::unique_ptr<uint64_t> start;  // released by the scheduler before the block, acquired by each thread
  RaceLaunch* launch = nullptr;
};

struct Block {
  // the launch
  StartThreads start_threads = nullptr;
  const void* call = nullptr;
  dim3 block_dim;
  int n = 0;
  // scheduling
  std::vector<Thread> threads;
  std::vector<int> order;       // start order of threads
  std::vector<int> lane_order;  // order in which a warp's released lanes are queued
  std::vector<int> queue;       // FIFO of ready threads, a ring of 2^k >= n: each waits in it at most once
  unsigned queue_head = 0, queue_size = 0, queue_mask = 0;
  ThreadStarts starts;                                    // the runners' progress
  boost::context::detail::fcontext_t scheduler = nullptr;  // BlockRunner::run, waiting for the block to end
  boost::context::detail::fcontext_t discard = nullptr;    // where a finished fiber's context is "saved"
  FiberSanitizerState scheduler_sanitizer;  // the scheduler's stack, and fake stack while a block runs
  int new_runner_stack = -1;
  int running_stack = -1;  // the stack of the fiber running now
  // barrier and warp collectives in progress
  int barrier_arrived = 0, barrier_true = 0;
  uint64_t barriers_completed = 0;
  CallSite barrier_site;  // where the barrier's first thread arrived (synccheck)
  int barrier_first = -1;
  std::vector<unsigned> warp_arrived;  // per warp: the lanes waiting in a collective
  std::vector<WarpWaiting> warp_waiting;  // per warp: their masks (synccheck)
  // fiber stacks, reused across blocks and launches (under racecheck each thread's is its fiber's)
  std::vector<Stack> stacks;
  std::vector<int> free_stacks;
  size_t stack_bytes = 0;
  BlockRaces races;
  std::string error;

  // The running thread, from threadIdx (which the runners' loop sets).
  int current() const { return int((threadIdx.z * block_dim.y + threadIdx.y) * block_dim.x + threadIdx.x); }
  // The stack with this index: under racecheck, thread `index`'s own.
  const Stack& stack(int index) const { return racecheck ? races.threads[index].stack : stacks[index]; }
};

inline dim3 thread_index(const Block& b, int id) {
  return dim3(id % b.block_dim.x, (id / b.block_dim.x) % b.block_dim.y, id / (b.block_dim.x * b.block_dim.y));
}

// racecheck (cpu/launch/race_fibers.cpp): before the block runs, each thread's fiber and stack and the
// block's sync objects; after it, the fibers retired to the launch (or, the block failed, ended).
void begin_races(Block& b, const BlockLaunch& launch);
void end_races(Block& b);

// The block running on this OS thread (BlockRunner::run sets it).
extern thread_local Block* current_block;

// A kernel's barrier or collective outside any block: aborts, naming it.
[[noreturn, gnu::cold]] void called_outside_a_kernel(const char* what);

inline Block& block_of_caller(const char* what) {
  if (!current_block) called_outside_a_kernel(what);
  return *current_block;
}

// From inside a fiber: wait until released (the thread's wait fields say at what).
void suspend(Block& b);

// Gives thread `id` its result and queues it to run (unless it is the caller, which goes on).
// Inline: a collective releases each of its 32 lanes.
inline void release(Block& b, int id, uint64_t result) {
  Thread& t = b.threads[id];
  t.result = result;
  t.wait = Wait::none;
  if (id == b.current()) return;
  b.queue[(b.queue_head + b.queue_size++) & b.queue_mask] = id;
}

// Leaves the fiber for good, the block failing with `what`.
[[noreturn, gnu::cold, gnu::noinline]] void fail_in_fiber(Block& b, const std::string& what);

// A deadlock in which some lane waits in a warp collective, described; "" if no lane waits.
std::string warp_deadlock_report(const Block& b);

// "kernels/layernorm.cu:34"; thread (x,y,z) of the block, from its linear id.
std::string site_text(const CallSite& site);
std::string thread_text(const Block& b, int id);

}  // namespace cpu
