// Runs one CUDA block on the CPU: every thread of the block is a fiber (Boost.Context
// fcontext, switched by cpu/launch/fiber_switch.h, a few ns per switch), all on the calling
// OS thread.
//
// Threads that never synchronise cost no fiber of their own: a "runner" fiber calls
// the kernel for one thread after another (a loop instantiated per kernel, with the
// kernel's body inlined: cpu/launch/launch_kernel.h). When the thread it is running blocks
// (__syncthreads, a shuffle, a vote), the runner's fiber becomes that thread's
// fiber, and the threads not yet started get a new runner. So a kernel without
// synchronisation runs as a plain loop, and one that synchronises everywhere ends
// up with one fiber per thread. Under `make racecheck` a runner runs one thread only,
// each thread on a stack of its own (cpu/check/race_annotations.h).
//
// Threads start in an order (natural, reversed or shuffled: cpu/runtime/settings.h) and run
// until they block; a barrier or warp collective that completes releases its
// waiters to a FIFO run queue. A fiber that blocks or ends switches straight to the
// next ready thread (or starts a runner for threads not yet started): one context
// switch per wait. When nothing can run and threads are left, the block is
// deadlocked (a barrier or collective that some thread never reaches): control goes
// back to BlockRunner::run, which reports it naming the kernel instead of hanging.
//
// synccheck: every barrier records its call site; threads of one block meeting at different
// __syncthreads, or a barrier some threads never reach because they returned, fail the block
// naming the sites. The warp collectives' checks are in cpu/launch/warp_collectives.cpp.
#include "cpu/launch/block_scheduler.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <stdexcept>

#include "cpu/launch/block_scheduler_internal.h"
#include "cpu/launch/fiber_switch.h"
#include "cpu/check/race_annotations.h"

namespace fc = boost::context::detail;

namespace cpu {
namespace {

void set_thread_index(const Block& b, int id) {
  if (b.block_dim.y == 1 && b.block_dim.z == 1) {  // the common case, without divisions
    threadIdx.x = unsigned(id);
    threadIdx.y = threadIdx.z = 0;
    return;
  }
  threadIdx.x = id % b.block_dim.x;
  threadIdx.y = (id / b.block_dim.x) % b.block_dim.y;
  threadIdx.z = id / (b.block_dim.x * b.block_dim.y);
}

// Maps a stack of `bytes` (and a guard page); `index` sets its top back.
Stack map_stack(size_t bytes, size_t index) {
  const size_t page = 4096;
  Stack s;
  s.bytes = bytes + 2 * page;  // the guard page, and room to set the top back
  s.memory = mmap(nullptr, s.bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (s.memory == MAP_FAILED) throw std::runtime_error("cpu: cannot map a fiber stack");
  mprotect(s.memory, page, PROT_NONE);  // an overflow faults instead of corrupting
  s.set_back = index * 7 % 64 * 64;
  return s;
}

int take_stack(Block& b) {
  if (b.free_stacks.empty()) {
    b.stacks.push_back(map_stack(b.stack_bytes, b.stacks.size()));
    return int(b.stacks.size()) - 1;
  }
  const int s = b.free_stacks.back();
  b.free_stacks.pop_back();
  return s;
}

// The thread the next runner starts (its id), under racecheck the one whose fiber it becomes.
int next_to_start(const Block& b) { return b.starts.order ? b.starts.order[b.starts.next] : b.starts.next; }

// The stack of the next runner: a free one, or under racecheck its thread's.
int take_runner_stack(Block& b) { return racecheck ? next_to_start(b) : take_stack(b); }

void runner(fc::transfer_t from);

// Leaves the running fiber for the next ready thread, else a new runner for the
// threads not yet started, else the scheduler (all done, or deadlocked). The
// fiber's context is saved in *save. Whoever is resumed stores the context of the
// fiber it came from where that fiber asked (the transfer's data).
void switch_to_next(Block& b, fc::fcontext_t* save) {
  fc::fcontext_t target;
  // A fiber that ends (its context "saved" in discard) gives up its fake stack.
  FiberSanitizerState* leaving = save == &b.discard ? nullptr : &b.threads[b.current()].sanitizer;
  if (b.queue_size > 0) {
    const int id = b.queue[b.queue_head];
    b.queue_head = (b.queue_head + 1) & b.queue_mask;
    --b.queue_size;
    set_thread_index(b, id);
    target = b.threads[id].context;
    const Stack& s = b.stack(b.threads[id].stack);
    sanitizer_start_switch(leaving, s.memory, s.bytes);
    if (racecheck) race_switch_to(b.races.threads[id].fiber);
  } else if (b.starts.next < b.n) {
    if (racecheck) race_switch_to(b.races.threads[next_to_start(b)].fiber);
    b.new_runner_stack = take_runner_stack(b);
    const Stack& s = b.stack(b.new_runner_stack);
    target = fc::make_fcontext(s.top(), s.usable(), runner);
    sanitizer_start_new_fiber(leaving, s.memory, s.bytes);
  } else {
    target = b.scheduler;
    sanitizer_start_switch(leaving, b.scheduler_sanitizer.stack_bottom, b.scheduler_sanitizer.stack_bytes);
    if (racecheck) race_switch_to(b.races.scheduler);
  }
  fc::transfer_t t = switch_fiber(target, save);
  sanitizer_finish_switch(leaving);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
  b.running_stack = b.threads[b.current()].stack;  // only a suspended thread is resumed here
}

// A fiber that starts threads one after another until none are left unstarted.
// When the thread it runs blocks, the fiber stays with that thread; once the
// thread ends, the fiber goes on starting threads (under racecheck it ends with its thread).
void runner(fc::transfer_t from) {
  Block& b = *current_block;
  sanitizer_finish_first_switch(b.scheduler_sanitizer);
  *static_cast<fc::fcontext_t*>(from.data) = from.fctx;
  const int my_stack = b.new_runner_stack;
  b.running_stack = my_stack;
  if (racecheck) race_acquire(b.races.start.get());  // after what the stream did before the launch
  b.start_threads(b.call, b.starts);
  if (racecheck) race_release(&b.races.launch->end);
  else b.free_stacks.push_back(my_stack);  // no thread is left to start, so no runner starts on it
  switch_to_next(b, &b.discard);
  __builtin_unreachable();
}

bool same_site(const CallSite& a, const CallSite& b) {
  return a.line == b.line && (a.file == b.file || std::strcmp(a.file, b.file) == 0);
}

[[noreturn, gnu::cold, gnu::noinline]] void fail_at_different_barriers(Block& b, int other, CallSite other_site) {
  fail_in_fiber(b, "threads of the block meet at different __syncthreads: thread " + thread_text(b, b.barrier_first) +
                       " at " + site_text(b.barrier_site) + ", thread " + thread_text(b, other) + " at " +
                       site_text(other_site));
}

std::string barrier_deadlock_report(const Block& b) {
  // Every thread has started (the runners start them all before control comes back); those
  // not waiting have finished.
  int at_barrier = 0, finished = 0, first_finished = -1;
  for (int id = 0; id < b.n; ++id) {
    const Thread& t = b.threads[id];
    if (t.wait == Wait::barrier) {
      ++at_barrier;
    } else if (t.wait == Wait::none) {
      if (first_finished < 0) first_finished = id;
      ++finished;
    }
  }
  std::ostringstream s;
  s << "__syncthreads at " << site_text(b.barrier_site) << " reached by " << at_barrier << " of " << b.n
    << " threads; " << finished << " returned without reaching it";
  if (first_finished >= 0) s << " (thread " << thread_text(b, first_finished) << " among them)";
  return s.str();
}

}  // namespace

thread_local Block* current_block = nullptr;

void called_outside_a_kernel(const char* what) {
  std::fprintf(stderr, "cpu: %s called outside a kernel\n", what);
  std::abort();
}

void suspend(Block& b) {
  ++b.starts.suspensions;
  const int id = b.current();
  Thread& t = b.threads[id];
  t.stack = b.running_stack;  // the fiber now belongs to this thread until it ends
  switch_to_next(b, &t.context);
}

// Errors leave the fiber for good. Cold and out of line, so that the frames of the hot
// paths (a shuffle is a few ns) carry no string temporaries.
void fail_in_fiber(Block& b, const std::string& what) {
  race_ignore_begin();
  b.error = what;
  race_ignore_end();
  sanitizer_start_switch(nullptr, b.scheduler_sanitizer.stack_bottom, b.scheduler_sanitizer.stack_bytes);
  if (racecheck) race_switch_to(b.races.scheduler);
  switch_fiber(b.scheduler, &b.discard);
  __builtin_unreachable();  // the scheduler abandons this fiber
}

std::string site_text(const CallSite& site) {
  return std::string(site.file ? site.file : "?") + ":" + std::to_string(site.line);
}

std::string thread_text(const Block& b, int id) {
  const dim3 t = thread_index(b, id);
  return "(" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) + ")";
}

// Under racecheck the runner's loop (cpu/launch/thread_starts.h) starts one thread through this.
bool begin_thread(ThreadStarts& starts) {
  if (starts.next >= starts.count) return false;
  set_thread_index(*current_block, next_to_start(*current_block));
  ++starts.next;
  return true;
}

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
  b.queue.resize(std::bit_ceil(unsigned(b.n)));
  b.queue_mask = unsigned(b.queue.size()) - 1;
  b.queue_head = b.queue_size = 0;
  b.starts = ThreadStarts{0, b.n, b.order.empty() ? nullptr : b.order.data(), b.block_dim, 0};
  b.barrier_arrived = b.barrier_true = 0;
  b.barriers_completed = 0;
  b.warp_arrived.assign((b.n + 31) / 32, 0u);
  b.warp_waiting.resize((b.n + 31) / 32);  // each warp's first arrival sets its entry
  b.error.clear();
  if (b.free_stacks.size() != b.stacks.size()) {  // a failed block left fibers behind
    b.free_stacks.clear();
    for (int s = int(b.stacks.size()) - 1; s >= 0; --s) b.free_stacks.push_back(s);
  }
  if (racecheck) begin_races(b, launch);

  current_block = &b;
  if (racecheck) race_switch_to(b.races.threads[next_to_start(b)].fiber);
  b.new_runner_stack = take_runner_stack(b);
  const Stack& first = b.stack(b.new_runner_stack);
  sanitizer_start_block(b.scheduler_sanitizer, first.memory, first.bytes);
  fc::transfer_t t = switch_fiber(fc::make_fcontext(first.top(), first.usable(), runner), &b.scheduler);
  sanitizer_finish_switch(&b.scheduler_sanitizer);
  *static_cast<fc::fcontext_t*>(t.data) = t.fctx;
  const bool waiting =
      b.barrier_arrived > 0 || std::any_of(b.warp_arrived.begin(), b.warp_arrived.end(), [](unsigned w) { return w != 0; });
  if (b.error.empty() && waiting) {
    b.error = warp_deadlock_report(b);
    if (b.error.empty()) b.error = barrier_deadlock_report(b);
  }
  current_block = nullptr;
  if (racecheck) end_races(b);
  if (b.error.empty()) return true;
  error = "block (" + std::to_string(launch.block_index.x) + "," + std::to_string(launch.block_index.y) + "," +
          std::to_string(launch.block_index.z) + "): " + b.error;
  return false;
}

namespace {

int block_barrier(int predicate, CallSite site) {
  Block& b = block_of_caller("__syncthreads");
  const int id = b.current();
  if (b.barrier_arrived == 0) {
    b.barrier_site = site;
    b.barrier_first = id;
  } else if (!same_site(site, b.barrier_site)) {
    fail_at_different_barriers(b, id, site);
  }
  ++b.barrier_arrived;
  b.barrier_true += predicate != 0;
  b.threads[id].wait = Wait::barrier;
  // racecheck: every thread releases the barrier's object as it arrives and acquires it as it
  // goes on. Two objects, by the parity of the barrier's count: a thread that goes on and arrives
  // at the next barrier before the others have gone on releases the other object.
  const uint64_t parity = b.barriers_completed & 1;
  if (racecheck) race_release(&b.races.barriers[parity]);
  if (b.barrier_arrived < b.n) {
    suspend(b);
    if (racecheck) race_acquire(&b.races.barriers[parity]);
    return int(b.threads[id].result);
  }
  const uint64_t count = uint64_t(b.barrier_true);
  b.barrier_arrived = b.barrier_true = 0;
  ++b.barriers_completed;
  for (int k = 0; k < b.n; ++k) release(b, b.order.empty() ? k : b.order[k], count);
  if (racecheck) race_acquire(&b.races.barriers[parity]);
  return int(count);
}

}  // namespace

thread_local unsigned char* dynamic_shared_memory = nullptr;

}  // namespace cpu

void __syncthreads(const char* file, unsigned line) { cpu::block_barrier(1, {file, line}); }
int __syncthreads_count(int predicate, const char* file, unsigned line) {
  return cpu::block_barrier(predicate, {file, line});
}
int __syncthreads_and(int predicate, const char* file, unsigned line) {
  return cpu::block_barrier(predicate, {file, line}) == int(blockDim.x * blockDim.y * blockDim.z);
}
int __syncthreads_or(int predicate, const char* file, unsigned line) {
  return cpu::block_barrier(predicate, {file, line}) != 0;
}
