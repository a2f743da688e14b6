// Atomics from many blocks: results checked against plain C++, and each thread's returned
// values checked for exactly-once semantics. In the CPU build, blocks may run on several OS
// threads (CUDA_CPU_BLOCK_THREADS; tools/run_tests.sh also runs unit_tests with 1). A short launch
// often ends on the calling OS thread before a second one wakes, the more so on a loaded machine,
// so in the exactly-once checks a block that comes in alone waits for another before its atomics
// (enter): where blocks can run at once, they race there by construction, not by timing.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

#include "kernels/cuda_check.cuh"
#include "kernels/launch.cuh"
#include "tests/device_buffer.h"

namespace {

// Many blocks, each with many threads and repeats: many pairs of blocks race.
constexpr int kBlocks = 400, kThreads = 96, kCount = kBlocks * kThreads;
constexpr int kRepeats = 16, kOperations = kCount * kRepeats;  // per thread, and in all

__device__ int thread_id() { return int(blockIdx.x * blockDim.x + threadIdx.x); }

// How blocks overlap: each counts itself in after a first barrier and out before a last one.
// With rendezvous (a device that runs blocks at once: several multiprocessors, or several OS
// threads in the CPU build), a block that comes in alone waits until another is in flight, or
// until every block has come in (then no other can come: waiting longer would never end);
// overlapped counts the blocks that saw another in flight. Only the blocks still in flight once
// all have come in may run alone, so all blocks but a few overlap, whatever the machine's load.
struct Flight {
  int rendezvous, in_flight, entered, overlapped;
};
__device__ void enter(Flight* flight) {
  __syncthreads();
  if (threadIdx.x == 0) {
    atomicAdd(&flight->in_flight, 1);
    atomicAdd(&flight->entered, 1);
    bool beside_another = atomicAdd(&flight->in_flight, 0) > 1;
    while (flight->rendezvous && !beside_another && atomicAdd(&flight->entered, 0) < int(gridDim.x))
      beside_another = atomicAdd(&flight->in_flight, 0) > 1;
    if (beside_another) atomicAdd(&flight->overlapped, 1);
  }
  __syncthreads();
}
__device__ void leave(Flight* flight) {
  __syncthreads();
  if (threadIdx.x == 0) atomicSub(&flight->in_flight, 1);
}

// Runs launch_and_check(flight), whose kernel's blocks enter and leave the flight. On a device
// of more than one multiprocessor (one: blocks never run at once, and a waiting block would wait
// forever) the blocks rendezvous, and at least half of them (by construction all but a few) must
// have run beside another: else the atomics did not race and the check proved nothing.
template <typename LaunchAndCheck>
void with_blocks_racing(LaunchAndCheck launch_and_check) {
  cudaDeviceProp properties;
  CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
  const int rendezvous = properties.multiProcessorCount > 1;
  DeviceBuffer<Flight> flight(std::vector<Flight>{{rendezvous, 0, 0, 0}});
  launch_and_check(flight.data());
  if (rendezvous) {
    EXPECT_GE(flight.to_host()[0].overlapped, kBlocks / 2) << "blocks that ran beside another";
  }
}

// first, first + 1, ..., last.
std::vector<int> consecutive(int first, int last) {
  std::vector<int> values(last - first + 1);
  std::iota(values.begin(), values.end(), first);
  return values;
}

template <typename T>
std::vector<T> sorted(std::vector<T> values) {
  std::sort(values.begin(), values.end());
  return values;
}

__global__ void histogram(int* bins, const int* values, int n, int nbins) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    atomicAdd(&bins[values[i] % nbins], 1);
}

TEST(Atomics, IntegerAddFromManyBlocksCountsEveryValue) {
  const int n = 100000, nbins = 7;
  std::vector<int> values(n);
  for (int i = 0; i < n; ++i) values[i] = i * 31 % 1001;
  DeviceBuffer<int> d_values(values), bins(std::vector<int>(nbins, 0));
  launch(histogram, dim3(64), dim3(128), 0, nullptr, bins.data(), d_values.data(), n, nbins);
  std::vector<int> expect(nbins, 0);
  for (int v : values) ++expect[v % nbins];
  EXPECT_EQ(bins.to_host(), expect);
}

__global__ void add_float_and_double(float* f, double* d, unsigned long long* u) {
  atomicAdd(f, 0.5f);  // exact in any order: sums of halves below 2^24
  atomicAdd(d, 0.25);
  atomicAdd(u, 3ull);
}

TEST(Atomics, FloatDoubleAndUnsignedAddsAreNotLost) {
  DeviceBuffer<float> f(std::vector<float>{0.0f});
  DeviceBuffer<double> d(std::vector<double>{0.0});
  DeviceBuffer<unsigned long long> u(std::vector<unsigned long long>{0});
  launch(add_float_and_double, dim3(200), dim3(256), 0, nullptr, f.data(), d.data(), u.data());
  EXPECT_EQ(f.to_host()[0], 0.5f * 200 * 256);
  EXPECT_EQ(d.to_host()[0], 0.25 * 200 * 256);
  EXPECT_EQ(u.to_host()[0], 3ull * 200 * 256);
}

__global__ void max_and_min(int* max_value, unsigned* min_value) {
  const int id = thread_id();
  atomicMax(max_value, (id * 7919) % 10007);
  atomicMin(min_value, unsigned((id * 104729) % 10009 + 5));
}

TEST(Atomics, MaxAndMinAgreeWithLoops) {
  const int blocks = 40, threads = 96;  // ids below 2^31 / 104729
  DeviceBuffer<int> max_value(std::vector<int>{-1});
  DeviceBuffer<unsigned> min_value(std::vector<unsigned>{~0u});
  launch(max_and_min, dim3(blocks), dim3(threads), 0, nullptr, max_value.data(), min_value.data());
  int expect_max = -1;
  unsigned expect_min = ~0u;
  for (int id = 0; id < blocks * threads; ++id) {
    expect_max = std::max(expect_max, (id * 7919) % 10007);
    expect_min = std::min(expect_min, unsigned((id * 104729) % 10009 + 5));
  }
  EXPECT_EQ(max_value.to_host()[0], expect_max);
  EXPECT_EQ(min_value.to_host()[0], expect_min);
}

__global__ void take_tickets(int* counter, int* tickets, Flight* flight) {
  enter(flight);
  for (int r = 0; r < kRepeats; ++r) tickets[thread_id() * kRepeats + r] = atomicAdd(counter, 1);
  leave(flight);
}

TEST(Atomics, IntegerAddHandsOutEachTicketOnce) {
  with_blocks_racing([](Flight* flight) {
    DeviceBuffer<int> counter(std::vector<int>{0}), tickets(kOperations);
    launch(take_tickets, dim3(kBlocks), dim3(kThreads), 0, nullptr, counter.data(), tickets.data(), flight);
    EXPECT_EQ(sorted(tickets.to_host()), consecutive(0, kOperations - 1));
    EXPECT_EQ(counter.to_host()[0], kOperations);
  });
}

// A lock-free allocator: owners[s] is -1 until a thread claims slot s with atomicCAS. Each
// claim starts at the cursor (every slot below it is taken) and takes the first slot whose
// CAS saw -1. A broken CAS runs off the end and records the slot count.
__global__ void claim_slots(int* owners, int* cursor, int* claimed, Flight* flight) {
  enter(flight);
  for (int r = 0; r < kRepeats; ++r) {
    int slot = atomicAdd(cursor, 0);
    while (slot < kOperations && atomicCAS(&owners[slot], -1, thread_id()) != -1) ++slot;
    atomicMax(cursor, slot + 1);
    claimed[thread_id() * kRepeats + r] = slot;
  }
  leave(flight);
}

TEST(Atomics, CasGivesEachSlotToExactlyOneThread) {
  with_blocks_racing([](Flight* flight) {
    DeviceBuffer<int> owners(std::vector<int>(kOperations, -1)), cursor(std::vector<int>{0}), claimed(kOperations);
    launch(claim_slots, dim3(kBlocks), dim3(kThreads), 0, nullptr, owners.data(), cursor.data(), claimed.data(),
           flight);
    // Exactly one thread saw each slot free, and the slot is that thread's.
    const std::vector<int> claimed_host = claimed.to_host(), owners_host = owners.to_host();
    EXPECT_EQ(sorted(claimed_host), consecutive(0, kOperations - 1));
    for (int i = 0; i < kOperations; ++i) {
      const int slot = claimed_host[i], thread = i / kRepeats;
      if (slot < 0 || slot >= kOperations || owners_host[slot] != thread) {
        ADD_FAILURE() << "thread " << thread << " claimed slot " << slot << " but does not own it";
        break;
      }
    }
  });
}

// Each thread stores kRepeats values of its own and keeps what each store replaced.
template <typename T>
__global__ void exchange_chain(T* last, T* replaced, Flight* flight) {
  enter(flight);
  for (int r = 0; r < kRepeats; ++r) {
    const int value = thread_id() * kRepeats + r;
    replaced[value] = atomicExch(last, T(value));
  }
  leave(flight);
}

// The replaced values and the final one are the initial -1 and every stored value, each
// once: no store was lost or seen twice. T holds the values exactly (floats below 2^24).
template <typename T>
void expect_exchange_chain_exactly_once() {
  with_blocks_racing([](Flight* flight) {
    DeviceBuffer<T> last(std::vector<T>{T(-1)}), replaced(kOperations);
    launch(exchange_chain<T>, dim3(kBlocks), dim3(kThreads), 0, nullptr, last.data(), replaced.data(), flight);
    std::vector<int> values;
    for (T value : replaced.to_host()) values.push_back(int(value));
    values.push_back(int(last.to_host()[0]));
    EXPECT_EQ(sorted(values), consecutive(-1, kOperations - 1));
  });
}

TEST(Atomics, ExchangeReturnsEachStoredValueOnce) {
  expect_exchange_chain_exactly_once<int>();
  expect_exchange_chain_exactly_once<float>();
}

}  // namespace
