// `make racecheck`: each CUDA thread's ThreadSanitizer fiber and stack (cpu/check/race_annotations.h
// says how the scheduler orders them). Compiled without instrumentation, as the scheduler is.
//
// A fiber keeps its history: the thread that runs on it next is ordered after everything it did.
// So no two blocks of one launch share a fiber (a launch's fibers retire to the launch and come
// back only once all its blocks are done), while a later launch may reuse them: it is ordered
// after this one anyway, by its stream or by the host's synchronisation (or by the runtime's
// lock, which orders the streams' operations as they happen to run). Each fiber always runs on
// the same stack, so that the stack's addresses are never touched by two fibers that nothing
// orders. Making a fiber costs ThreadSanitizer a mapping and its clock, and the fibers of GPT's
// launches number in the thousands: kept, they make racecheck several times faster.
#include <sys/mman.h>

#include <mutex>
#include <stdexcept>
#include <vector>

#include "cpu/launch/block_scheduler_internal.h"
#include "cpu/check/race_annotations.h"

namespace cpu {
namespace {

// At most this many fibers wait for reuse, and as many retire to one launch (LayerNorm's tests
// launch up to 38 blocks of 256 threads); a larger launch makes fibers for the rest.
constexpr size_t kKeptFibers = 16384;

// Stacks are cut from slabs of this many, without guard pages: a guard page splits the mapping,
// and the process may have only 65530 mappings (vm.max_map_count). Racecheck's stacks are twice
// the size (instrumented frames are larger), so an overflow is not expected.
constexpr size_t kStacksPerSlab = 64;

struct Pool {
  std::mutex mutex;
  std::vector<RaceThread> free;
  std::vector<Stack> free_stacks;  // of fibers ended, their pages mapped anew
};
// Made before main (a function's static would be made behind a guard ThreadSanitizer does not see
// in this uninstrumented file).
Pool& the_pool = *new Pool;
Pool& pool() { return the_pool; }

// A stack no fiber has run on; the caller holds the pool's mutex.
Stack take_stack(Pool& p, size_t bytes) {
  if (p.free_stacks.empty()) {
    const size_t stack_bytes = 2 * bytes + 2 * 4096;  // room for the set-back as map_stack leaves
    char* slab = static_cast<char*>(mmap(nullptr, kStacksPerSlab * stack_bytes, PROT_READ | PROT_WRITE,
                                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0));
    if (slab == MAP_FAILED) throw std::runtime_error("cpu: cannot map fiber stacks");
    for (size_t i = 0; i < kStacksPerSlab; ++i)
      p.free_stacks.push_back(Stack{slab + i * stack_bytes, stack_bytes, i * 7 % 64 * 64});
  }
  const Stack s = p.free_stacks.back();
  p.free_stacks.pop_back();
  return s;
}

// Ends the fiber; its stack, mapped anew (which makes ThreadSanitizer forget what the fiber did
// there), waits for another.
void end_fiber(const RaceThread& t) {
  race_destroy_fiber(t.fiber);
  const int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED;
  if (mmap(t.stack.memory, t.stack.bytes, PROT_READ | PROT_WRITE, flags, -1, 0) == MAP_FAILED)
    throw std::runtime_error("cpu: cannot map a fiber stack anew");
  std::lock_guard<std::mutex> lock(pool().mutex);
  pool().free_stacks.push_back(t.stack);
}

}  // namespace

void begin_races(Block& b, const BlockLaunch& launch) {
  BlockRaces& r = b.races;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    const size_t reused = std::min(p.free.size(), size_t(b.n));
    r.threads.assign(p.free.end() - std::ptrdiff_t(reused), p.free.end());
    p.free.resize(p.free.size() - reused);
  }
  while (int(r.threads.size()) < b.n) {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    r.threads.push_back({race_create_fiber(), take_stack(p, b.stack_bytes)});
  }
  for (int id = 0; id < b.n; ++id) race_name_fiber(r.threads[id].fiber, launch.block_index, thread_index(b, id));
  r.scheduler = race_current_fiber();
  // Sync objects in fresh memory: ThreadSanitizer keeps no order from an earlier block in them.
  std::vector<uint64_t>(b.n).swap(r.arrive);
  std::vector<uint64_t>(b.n).swap(r.wake);
  std::vector<uint64_t>(2).swap(r.barriers);
  r.start = std::make_unique<uint64_t>();
  race_release(r.start.get());
  r.launch = launch.race;
}

void end_races(Block& b) {
  BlockRaces& r = b.races;
  // A failed block's fibers were abandoned mid-kernel: not reused.
  std::unique_lock<std::mutex> lock(r.launch->mutex);
  if (b.error.empty() && r.launch->retired.size() + r.threads.size() <= kKeptFibers) {
    r.launch->retired.insert(r.launch->retired.end(), r.threads.begin(), r.threads.end());
  } else {
    lock.unlock();
    for (const RaceThread& t : r.threads) end_fiber(t);
  }
  r.threads.clear();
}

void race_launch_done(RaceLaunch& launch) {
  std::vector<RaceThread> extra;
  {
    Pool& p = pool();
    std::lock_guard<std::mutex> lock(p.mutex);
    for (const RaceThread& t : launch.retired) (p.free.size() < kKeptFibers ? p.free : extra).push_back(t);
  }
  for (const RaceThread& t : extra) end_fiber(t);
  launch.retired.clear();
}

}  // namespace cpu
