// Kernel launch for the CPU build: checks the configuration as CUDA does, then queues the grid
// on its stream, whose worker runs the blocks itself or spread over CUDA_CPU_BLOCK_THREADS OS
// threads. As on a GPU, launch() returns before the kernel has run.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cpu/block_scheduler.h"
#include "cpu/call_counts.h"
#include "cpu/runtime_state.h"
#include "cpu/streams.h"
#include "cpu/symbol_name.h"

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
};

// Runs blocks of `g` until none are left; one call per OS thread.
void run_blocks(Grid& g) {
  thread_local BlockRunner runner(settings().stack_bytes);
  thread_local std::vector<unsigned char> shared;
  RunningOperation running("kernel", g.device, g.kernel);
  const uint64_t blocks = uint64_t(g.grid.x) * g.grid.y * g.grid.z;
  if (shared.size() < g.shared_bytes) shared.resize(g.shared_bytes);
  dynamic_shared_memory = shared.data();
  blockDim = g.block;
  gridDim = g.grid;
  std::string error;
  for (uint64_t k; !g.failed.load(std::memory_order_relaxed) && (k = g.next.fetch_add(1)) < blocks;) {
    const uint64_t linear = g.block_order.empty() ? k : g.block_order[k];
    blockIdx.x = unsigned(linear % g.grid.x);
    blockIdx.y = unsigned(linear / g.grid.x % g.grid.y);
    blockIdx.z = unsigned(linear / (uint64_t(g.grid.x) * g.grid.y));
    if (g.order != ThreadOrder::natural) std::memset(shared.data(), 0xff, g.shared_bytes);  // NaN
    BlockLaunch b{g.start_threads, g.call.get(), g.block, blockIdx, g.order, g.seed ^ (linear * 0x9e3779b97f4a7c15ull)};
    if (!runner.run(b, error)) {
      std::lock_guard<std::mutex> lock(g.error_mutex);
      if (!g.failed.exchange(true)) g.error = error;
    }
  }
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
  if (threads <= 1) {
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
