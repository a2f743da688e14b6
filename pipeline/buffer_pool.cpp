// Device buffers of one size, by key (pipeline/buffer_pool.h).
#include "pipeline/buffer_pool.h"

#include <stdexcept>
#include <string>

#include "kernels/device_memory.cuh"

BufferPool make_pool(size_t bytes) { return BufferPool{bytes, {}, {}, {}, {}, {}}; }

int take(BufferPool& pool, int key) {
  if (pool.held.count(key)) throw std::runtime_error("executor: buffer " + std::to_string(key) + " taken twice");
  int index;
  if (pool.free.empty()) {
    pool.buffers.push_back(device_alloc_bytes(pool.bytes));
    pool.compute_step.push_back(-1);
    pool.transfer_step.push_back(-1);
    index = int(pool.buffers.size()) - 1;
  } else {
    index = pool.free.back();
    pool.free.pop_back();
  }
  pool.held[key] = index;
  return index;
}

int next_take(const BufferPool& pool) { return pool.free.empty() ? int(pool.buffers.size()) : pool.free.back(); }

int held(const BufferPool& pool, int key) {
  const auto found = pool.held.find(key);
  if (found == pool.held.end()) throw std::runtime_error("executor: buffer " + std::to_string(key) + " is not held");
  return found->second;
}

void give_back(BufferPool& pool, int key) {
  pool.free.push_back(held(pool, key));
  pool.held.erase(key);
}

void forget_steps(BufferPool& pool) {
  pool.compute_step.assign(pool.buffers.size(), -1);
  pool.transfer_step.assign(pool.buffers.size(), -1);
}

void destroy_pool(BufferPool& pool) {
  for (void* buffer : pool.buffers) device_free(buffer);
  pool = make_pool(0);
}

size_t pool_bytes(const BufferPool& pool) { return pool.bytes * pool.buffers.size(); }
