// Device buffers of one size, by key, planned then allocated (pipeline/buffer_pool.h).
#include "pipeline/buffer_pool.h"

#include <stdexcept>

#include "kernels/device_memory.cuh"

BufferPool make_pool(size_t bytes, const std::string& name) { return BufferPool{bytes, name, false, {}, {}, {}, {}, {}}; }

int take(BufferPool& pool, int key) {
  if (pool.held.count(key)) throw std::runtime_error("executor: buffer " + std::to_string(key) + " taken twice");
  int index;
  if (pool.free.empty()) {
    if (pool.allocated)
      throw std::runtime_error("executor: " + pool.name + " would grow past the " + std::to_string(pool.buffers.size()) +
                               " planned before step 1 (a device allocation inside a step)");
    pool.buffers.push_back(nullptr);
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

void allocate_pool(BufferPool& pool) {
  if (!pool.held.empty())
    throw std::runtime_error("executor: " + pool.name + ": " + std::to_string(pool.held.size()) +
                             " still held after the plan's walk");
  for (void*& buffer : pool.buffers) buffer = device_alloc_bytes(pool.bytes);
  pool.free.clear();
  for (int index = int(pool.buffers.size()) - 1; index >= 0; --index) pool.free.push_back(index);
  pool.allocated = true;
}

void forget_steps(BufferPool& pool) {
  pool.compute_step.assign(pool.buffers.size(), -1);
  pool.transfer_step.assign(pool.buffers.size(), -1);
}

void destroy_pool(BufferPool& pool) {
  for (void* buffer : pool.buffers) device_free(buffer);
  pool = make_pool(0, pool.name);
}

size_t pool_bytes(const BufferPool& pool) { return pool.bytes * pool.buffers.size(); }
