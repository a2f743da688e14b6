// Device buffers of one size, taken and given back by key (a microbatch and chunk), allocated on
// demand when none is free: a pool's size is the peak number held at once, and once the first
// step has reached it no step allocates again. The executor (pipeline/execute.h) keeps one pool
// per kind of buffer and lifetime.
#pragma once
#include <cstddef>
#include <map>
#include <vector>

struct BufferPool {
  size_t bytes;                // of each buffer
  std::vector<void*> buffers;  // every buffer allocated, in allocation order
  std::vector<int> free;       // indices into buffers
  std::map<int, int> held;     // key -> index
};

BufferPool make_pool(size_t bytes);
// Takes a free buffer (allocating one when none is) and holds it under key; returns its index.
// Throws std::runtime_error when key already holds one.
int take(BufferPool& pool, int key);
// The index of the buffer key holds; throws when it holds none.
int held(const BufferPool& pool, int key);
void give_back(BufferPool& pool, int key);
// Frees every buffer; the pool is empty after.
void destroy_pool(BufferPool& pool);
// Bytes of every buffer allocated.
size_t pool_bytes(const BufferPool& pool);
