// One order for a rank's NCCL operations (comm/nccl_order.h).
#include "comm/nccl_order.h"

#include "kernels/cuda_check.cuh"

namespace {

// Operations remembered for communicator_in_flight: far more than are ever queued ahead of the
// device between two host waits of a step's end (a step's buckets and its last groups).
constexpr size_t kRing = 64;

}  // namespace

NcclOrder create_nccl_order() {
  NcclOrder order;
  order.ends.resize(kRing);
  order.comms.assign(kRing, nullptr);
  for (cudaEvent_t& event : order.ends) CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return order;
}

void destroy_nccl_order(NcclOrder& order) {
  for (cudaEvent_t event : order.ends) CUDA_CHECK(cudaEventDestroy(event));
  order = NcclOrder{};
}

void issue_in_order(NcclOrder& order, ncclComm_t comm, cudaStream_t stream, const std::function<void()>& issue) {
  if (order.issued > 0 && order.last_stream != stream)
    CUDA_CHECK(cudaStreamWaitEvent(stream, order.ends[(order.issued - 1) % kRing], 0));
  issue();
  const size_t slot = order.issued % kRing;
  CUDA_CHECK(cudaEventRecord(order.ends[slot], stream));
  order.comms[slot] = comm;
  order.issued += 1;
  order.last_stream = stream;
}

ncclComm_t communicator_in_flight(const NcclOrder& order) {
  const uint64_t first = order.issued > kRing ? order.issued - kRing : 0;
  for (uint64_t i = first; i < order.issued; ++i)
    if (cudaEventQuery(order.ends[i % kRing]) == cudaErrorNotReady) return order.comms[i % kRing];
  return nullptr;
}
