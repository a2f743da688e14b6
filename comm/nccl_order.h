// One order for all of a rank's NCCL operations, whatever stream and communicator each is on.
//
// A rank issues NCCL work on three streams and four communicators: transfer groups on the
// executor's transfer stream (pipeline), gradient buckets and ZeRO-1's parameter broadcasts on
// the reduction stream (data parallel), the tied embedding's sum and the step's norm and loss sums on the compute stream
// (embedding, pipeline, world). NCCL's guide ("Using multiple NCCL communicators concurrently")
// says operations on different communicators must not be relied on to run at the same time, and
// that every rank should submit them in the same order: an NCCL kernel spins until its peers
// arrive, and a GPU may run one at a time. With dp = 2, pp = 2, replica 0's stage 0 could start a
// bucket's sum while replica 1's stage 0 starts a transfer first; each then spins waiting for the
// other's turn: a deadlock that needs no bug in either order, only two streams.
//
// So each operation's stream first waits for the end of the operation issued before it (when
// that one was on another stream): the device runs the rank's NCCL operations one after
// another, in the order the host issued them. That order is the same on every rank that shares
// a communicator: a replica issues its stage's schedule exactly as every other replica does, so a
// bucket's sum comes at the same place in each, and the simulator proves the transfers of one
// replica's stages free of deadlock when run one at a time in schedule order (pipeline/simulate.h).
// All of this holds for any NCCL version; NCCL 2.26's NCCL_LAUNCH_ORDER_IMPLICIT orders only
// the launches, and only where it exists. What it costs: a bucket's sum no longer overlaps a
// transfer group (it still overlaps the backward's compute).
//
// The order also tells an abort where to begin: the device runs at most one of the rank's NCCL
// operations, the first issued that has not ended, and aborting any other communicator first
// would wait for it (comm/groups.h).
#pragma once
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdint>
#include <functional>
#include <vector>

struct NcclOrder {
  std::vector<cudaEvent_t> ends;  // a ring: the ends of the last operations issued
  std::vector<ncclComm_t> comms;  // parallel to ends: each one's communicator
  uint64_t issued = 0;            // operations issued so far
  cudaStream_t last_stream = nullptr;
};

// Makes the ring's events on the current device.
NcclOrder create_nccl_order();
void destroy_nccl_order(NcclOrder& order);

// Queues `issue` (the NCCL calls of one operation on comm, a call or a group, on stream) as the
// rank's next NCCL operation: it starts once the one issued before it has ended.
void issue_in_order(NcclOrder& order, ncclComm_t comm, cudaStream_t stream, const std::function<void()>& issue);

// The communicator of the first operation issued that has not ended (the one the device runs or
// will run first), or nullptr when every operation the ring remembers has ended.
ncclComm_t communicator_in_flight(const NcclOrder& order);
