// Device buffers of one size, taken and given back by key (a microbatch and chunk), allocated on
// demand when none is free: a pool's size is the peak number held at once, and once the first
// step has reached it no step allocates again. The executor (pipeline/execute.h) keeps one pool
// per kind of buffer and lifetime.
//
// The executor runs compute and transfers on two streams; a buffer given back may still be read
// or written by the other stream. So each buffer remembers the schedule step of the current walk
// that last used it on each stream, and the next user on the other stream waits for that step's
// end event (pipeline/execute.cu says when).
#pragma once
#include <cstddef>
#include <map>
#include <vector>

struct BufferPool {
  size_t bytes;                // of each buffer
  std::vector<void*> buffers;  // every buffer allocated, in allocation order
  std::vector<int> free;       // indices into buffers
  std::map<int, int> held;     // key -> index
  // Parallel to buffers: the schedule step that last used each on the compute stream, and on the
  // transfer stream, in the current walk; -1: none.
  std::vector<int> compute_step, transfer_step;
};

BufferPool make_pool(size_t bytes);
// Takes a free buffer (allocating one when none is) and holds it under key; returns its index.
// Throws std::runtime_error when key already holds one.
int take(BufferPool& pool, int key);
// The index the next take will return (the last freed buffer, else the one it will allocate).
int next_take(const BufferPool& pool);
// The index of the buffer key holds; throws when it holds none.
int held(const BufferPool& pool, int key);
void give_back(BufferPool& pool, int key);
// Forgets the steps that last used each buffer (a new walk).
void forget_steps(BufferPool& pool);
// Frees every buffer; the pool is empty after.
void destroy_pool(BufferPool& pool);
// Bytes of every buffer allocated.
size_t pool_bytes(const BufferPool& pool);
