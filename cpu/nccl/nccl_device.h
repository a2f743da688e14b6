// What the CPU build's NCCL knows per device: which operations are running on it, and, with
// CUDA_CPU_NCCL_SERIAL=1, the rule that it runs one NCCL operation at a time.
//
// NCCL's guide ("Using multiple NCCL communicators concurrently") says operations on different
// communicators must not rely on running at the same time: an NCCL kernel spins until its peers
// arrive, and CUDA does not promise that a kernel on another stream gets the device meanwhile. A
// GPU may therefore run a device's NCCL operations one at a time, in the order they start. If
// two ranks start theirs in different orders, each spins in an operation whose peer is queued
// behind the other one: a deadlock the CPU build, whose operations all progress at once, never
// shows. In serial mode an operation waits at its device's gate, first come first served, until
// the one before it has ended, so such an order deadlocks here too.
//
// An operation has begun once it has passed the gate (at once outside serial mode) and ends when
// its data has arrived or it gave up (its communicator aborted). ncclCommAbort waits, as on a
// GPU, where its clean-up synchronises the device, for the operations of the device's other
// communicators that have begun: an abort is only safe once nothing else spins on the device.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

namespace cpu {

// Marks an operation of comms (a group may span several) on device as begun: in serial mode
// after waiting its turn. Returns false, without beginning, when give_up() becomes true while it
// waits (checked whenever wake_nccl_waiters is called for the device, and every millisecond).
bool begin_nccl_operation(int device, const std::vector<const void*>& comms, const std::function<bool()>& give_up);
void end_nccl_operation(int device, const std::vector<const void*>& comms);

// Wakes the device's waiters so that they check give_up again (an abort).
void wake_nccl_waiters(int device);

// Returns once no communicator of device other than comm has an operation begun and not ended.
void wait_for_other_communicators(int device, const void* comm);

// Operations that have begun on device, ever (tests use it to know one has started).
uint64_t nccl_operations_begun(int device);

}  // namespace cpu
