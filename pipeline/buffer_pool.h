// Device buffers of one size, taken and given back by key (a microbatch and chunk). A pool is
// planned, then allocated: while planned, a take with none free adds a buffer to the plan (no
// device memory); allocate_pool then allocates the planned buffers at once, and from then on a
// take with none free is an error that names the pool. The executor (pipeline/execute.h) keeps
// one pool per kind of buffer and lifetime, and plans them by walking its schedule's takes and
// gives-back before step 1: a device allocation synchronises the device, which inside a step
// could stall NCCL operations waiting on peers.
//
// The executor runs compute and transfers on two streams; a buffer given back may still be read
// or written by the other stream. So each buffer remembers the schedule step of the current walk
// that last used it on each stream, and the next user on the other stream waits for that step's
// end event (pipeline/execute.cu says when).
#pragma once
#include <cstddef>
#include <map>
#include <string>
#include <vector>

struct BufferPool {
  size_t bytes;                // of each buffer
  std::string name;            // what it holds, for errors: "stage 1 chunk 0's slots"
  bool allocated;              // allocate_pool has run: the pool no longer grows
  std::vector<void*> buffers;  // every buffer, in plan order; nullptr until allocate_pool
  std::vector<int> free;       // indices into buffers
  std::map<int, int> held;     // key -> index
  // Parallel to buffers: the schedule step that last used each on the compute stream, and on the
  // transfer stream, in the current walk; -1: none.
  std::vector<int> compute_step, transfer_step;
};

BufferPool make_pool(size_t bytes, const std::string& name);
// Takes a free buffer and holds it under key; returns its index. With none free, a planned pool
// plans one more; an allocated pool throws std::runtime_error naming itself. Throws when key
// already holds one.
int take(BufferPool& pool, int key);
// The index the next take will return (the last freed buffer, else the one it will plan).
int next_take(const BufferPool& pool);
// The index of the buffer key holds; throws when it holds none.
int held(const BufferPool& pool, int key);
void give_back(BufferPool& pool, int key);
// Allocates the planned buffers; throws when a key still holds one (the plan's walk did not give
// everything back). The takes after it return the buffers in index order, each given back
// buffer first, as a pool that grew on demand would.
void allocate_pool(BufferPool& pool);
// Forgets the steps that last used each buffer (a new walk).
void forget_steps(BufferPool& pool);
// Frees every buffer; the pool is empty after.
void destroy_pool(BufferPool& pool);
// Bytes of every buffer planned.
size_t pool_bytes(const BufferPool& pool);
