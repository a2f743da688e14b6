// Kernel launch for the CPU build: checks the configuration as CUDA does, then queues the grid
// on its stream, whose worker runs the blocks itself or spread over CUDA_CPU_BLOCK_THREADS OS
// threads (under `make racecheck`, each block on a new OS thread). As on a GPU, launch()
// returns before the kernel has run.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <sys/mman.h>

#include "cpu/launch/block_scheduler.h"
#include "cpu/runtime/call_counts.h"
#include "cpu/check/race_annotations.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/streams.h"
#include "cpu/runtime/symbol_name.h"

namespace cpu {
namespace {

constexpr size_t default_shared_limit = 48 << 10;  // without cudaFuncAttributeMaxDynamicSharedMemorySize
constexpr size_t optin_shared_limit = 227 << 10;   // sharedMemPerBlockOptin of an H100

std::mutex attribute_mutex;
std::map<const void*, size_t> shared_limits;  // kernels that opted in to more

// Everything a worker needs to run blocks of one launch.
struct Grid {
  StartThreads start_threads;
  std::shared_ptr<const void> call;
  const void* kernel;
  int device;
  dim3 grid, block;
  size_t shared_bytes;
  ThreadOrder order;
  uint64_t seed;
  std::vector<uint32_t> block_order;  // empty: natural
  std::atomic<uint64_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex error_mutex;
  std::string error;
  RaceLaunch race;  // racecheck
};

// Runs the k-th block of `g` (in its order of blocks) on the calling OS thread, with the
// dynamic shared memory enter_grid gave it.
void run_block(Grid& g, uint64_t k, BlockRunner& runner) {
  const uint64_t linear = g.block_order.empty() ? k : g.block_order[k];
  blockIdx.x = unsigned(linear % g.grid.x);
  blockIdx.y = unsigned(linear / g.grid.x % g.grid.y);
  blockIdx.z = unsigned(linear / (uint64_t(g.grid.x) * g.grid.y));
  if (g.order != ThreadOrder::natural) std::memset(dynamic_shared_memory, 0xff, g.shared_bytes);  // NaN
  BlockLaunch b{g.start_threads, g.call.get(), g.block, blockIdx, g.order, g.seed ^ (linear * 0x9e3779b97f4a7c15ull),
                &g.race};
  std::string error;
  if (!runner.run(b, error)) {
    std::lock_guard<std::mutex> lock(g.error_mutex);
    if (!g.failed.exchange(true)) g.error = error;
  }
}

// Prepares the calling OS thread to run blocks of `g`: the launch's dimensions, and `shared` as
// the blocks' dynamic shared memory.
void enter_grid(const Grid& g, unsigned char* shared) {
  dynamic_shared_memory = shared;
  blockDim = g.block;
  gridDim = g.grid;
}

void* map_shared_memory(size_t bytes) {
  void* memory = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (memory == MAP_FAILED) throw std::runtime_error("cpu: cannot map a block's shared memory");
  return memory;
}

// Runs blocks of `g` until none are left; one call per OS thread.
void run_blocks(Grid& g) {
  thread_local BlockRunner runner(settings().stack_bytes);
  thread_local std::vector<unsigned char> shared;
  RunningOperation running("kernel", g.device, g.kernel);
  if (shared.size() < g.shared_bytes) shared.resize(g.shared_bytes);
  enter_grid(g, shared.data());
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  for (uint64_t k; !g.failed.load(std::memory_order_relaxed) && (k = g.next.fetch_add(1)) < blocks;)
    run_block(g, k, runner);
}

// `make racecheck` runs each block on an OS thread of its own, at most block_threads at once:
// __shared__ variables are thread_local, and ThreadSanitizer forgets what an OS thread's
// thread_local memory saw only when a new thread starts, so a new thread is a block whose
// shared memory no earlier block has touched. Blocks are in no order (a block's thread starts
// after the stream's earlier work, and joining the thread of an earlier block orders nothing
// of that block's CUDA threads); every CUDA thread releases the launch's end as it finishes,
// which the stream acquires. The runners are kept for later blocks, the fibers for later launches.
void run_grid_racecheck(Grid& g, int block_threads) {
  // UCX (under MPICH) patches mmap and munmap, and calls through its patches bypass
  // ThreadSanitizer's: TSan then never forgets what memory that was unmapped and mapped again
  // saw (a block's stacks and shared memory), and reports races with threads long gone.
  static const bool ucx_hooks_off = [] {
    const char* events = std::getenv("UCX_MEM_EVENTS");
    if (events && std::strcmp(events, "no") == 0) return true;
    std::fprintf(stderr, "cpu: the racecheck build needs UCX_MEM_EVENTS=no in its environment (UCX's mmap hooks "
                         "hide unmapped memory from ThreadSanitizer); make racecheck sets it\n");
    std::exit(EXIT_FAILURE);
  }();
  (void)ucx_hooks_off;
  static std::mutex& runners_mutex = *new std::mutex;
  static auto& runners = *new std::vector<std::unique_ptr<BlockRunner>>;
  const auto run_alone = [&g](uint64_t k) {
    std::unique_ptr<BlockRunner> runner;
    {
      std::lock_guard<std::mutex> lock(runners_mutex);
      if (!runners.empty()) runner = std::move(runners.back()), runners.pop_back();
    }
    if (!runner) runner = std::make_unique<BlockRunner>(settings().stack_bytes);
    RunningOperation running("kernel", g.device, g.kernel);
    // Mapped, not allocated: unmapping makes ThreadSanitizer forget the accesses of the block's
    // threads, which nothing orders before the block's OS thread (a free() would race with them).
    void* shared = g.shared_bytes ? map_shared_memory(g.shared_bytes) : nullptr;
    enter_grid(g, static_cast<unsigned char*>(shared));
    run_block(g, k, *runner);
    if (shared) munmap(shared, g.shared_bytes);
    std::lock_guard<std::mutex> lock(runners_mutex);
    runners.push_back(std::move(runner));
  };
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  std::deque<std::thread> running;
  for (uint64_t k = 0; k < blocks && !g.failed; ++k) {
    if (int(running.size()) >= std::max(1, block_threads)) {
      running.front().join();
      running.pop_front();
    }
    running.emplace_back(run_alone, k);
  }
  for (std::thread& t : running) t.join();
  race_acquire(&g.race.end);
  race_launch_done(g.race);
}

// OS threads that help run the blocks of large launches. Never destroyed: its
// threads are detached and wait for work until the process ends.
class BlockThreadPool {
 public:
  void run(Grid& g, int threads) {
    while (int(workers_) < threads - 1) std::thread([this, index = workers_++] { work(index); }).detach();
    std::unique_lock<std::mutex> lock(mutex_);
    grid_ = &g;
    helpers_ = pending_ = threads - 1;
    started_ = 0;
    ++generation_;
    wake_.notify_all();
    // The blocks start once every helper is awake: otherwise the calling thread finishes a short
    // launch before a helper has woken, and blocks would never run at the same time.
    all_started_.wait(lock, [this] { return started_ == helpers_; });
    lock.unlock();
    run_blocks(g);
    lock.lock();
    finished_.wait(lock, [this] { return pending_ == 0; });
  }

 private:
  void work(int index) {
    for (uint64_t seen = 0;;) {
      Grid* g;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (index >= helpers_) continue;
        g = grid_;
        if (++started_ == helpers_) all_started_.notify_one();
      }
      run_blocks(*g);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--pending_ == 0) finished_.notify_one();
    }
  }

  int workers_ = 0;
  std::mutex mutex_;
  std::condition_variable wake_, all_started_, finished_;
  Grid* grid_ = nullptr;
  int helpers_ = 0, pending_ = 0, started_ = 0;
  uint64_t generation_ = 0;
};

cudaError_t check_configuration(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes) {
  const uint64_t threads = uint64_t(block.x) * block.y * block.z;
  if (threads == 0 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
    return cudaErrorInvalidConfiguration;
  if (grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535)
    return cudaErrorInvalidConfiguration;
  size_t limit = default_shared_limit;
  {
    std::lock_guard<std::mutex> lock(attribute_mutex);
    auto it = shared_limits.find(kernel);
    if (it != shared_limits.end()) limit = it->second;
  }
  if (shared_bytes > limit) return cudaErrorInvalidValue;
  return cudaSuccess;
}

// Runs a grid's blocks on the calling stream worker, with the pool's help when settings allow.
void run_grid(Grid& g, int block_threads) {
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  if (g.order != ThreadOrder::natural && blocks <= (1u << 24)) {
    g.block_order.resize(blocks);
    std::iota(g.block_order.begin(), g.block_order.end(), 0u);
    if (g.order == ThreadOrder::reverse) std::reverse(g.block_order.begin(), g.block_order.end());
    else std::shuffle(g.block_order.begin(), g.block_order.end(), std::mt19937_64(g.seed));
  }
  const int threads = int(std::min<uint64_t>(blocks, uint64_t(std::max(1, block_threads))));
  if (racecheck) {
    run_grid_racecheck(g, threads);
  } else if (threads <= 1) {
    run_blocks(g);
  } else {
    static BlockThreadPool& pool = *new BlockThreadPool;
    static std::mutex pool_mutex;  // one multi-threaded launch at a time
    std::lock_guard<std::mutex> lock(pool_mutex);
    pool.run(g, threads);
  }
  if (g.failed) {
    std::fprintf(stderr, "cpu: kernel %s, %s\n", symbol_name(g.kernel).c_str(), g.error.c_str());
    set_sticky_error(cudaErrorLaunchFailure);
  }
}

}  // namespace

void launch_kernel(const void* kernel, dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                   StartThreads start_threads, std::shared_ptr<const void> call) {
  if (sticky_error() != cudaSuccess) {
    set_error(sticky_error());
    return;
  }
  if (cudaError_t e = check_configuration(kernel, grid, block, shared_bytes); e != cudaSuccess) {
    set_error(e);
    return;
  }
  count_launch();
  static std::atomic<uint64_t> launches{0};
  // The settings in force at the launch (tests change them between launches).
  const Settings& s = settings();
  auto g = std::make_shared<Grid>();
  g->start_threads = start_threads;
  g->call = std::move(call);
  g->kernel = kernel;
  g->device = stream_device(stream);
  g->grid = grid;
  g->block = block;
  g->shared_bytes = shared_bytes;
  g->order = s.thread_order;
  g->seed = s.seed * 0xbf58476d1ce4e5b9ull + launches.fetch_add(1);
  const int block_threads = s.block_threads;
  enqueue(stream, "kernel", [g, block_threads] { run_grid(*g, block_threads); });
}

}  // namespace cpu

cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize)
    cpu::unsupported("cudaFuncSetAttribute with an attribute other than cudaFuncAttributeMaxDynamicSharedMemorySize");
  if (value < 0 || size_t(value) > cpu::optin_shared_limit) return cpu::set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cpu::attribute_mutex);
  cpu::shared_limits[func] = size_t(value);
  return cudaSuccess;
}
