// The point-to-point calls and collectives of the CPU build's NCCL (cpu/nccl/nccl.cpp says how it
// works): each checks its arguments, then submits one nonblocking MPI call on the host copies of
// its buffers (cpu/nccl/nccl_internal.h's Staging), queued on its stream (cpu/nccl/nccl_groups.cpp).
#include <cuda_bf16.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "cpu/runtime/call_counts.h"
#include "cpu/nccl/nccl_internal.h"
#include "cpu/runtime/errors.h"

using namespace cpu::nccl;

namespace {

struct Element {
  MPI_Datatype mpi;
  size_t bytes;
};

Element element(ncclDataType_t type, const char* function) {
  switch (type) {
    case ncclFloat32: return {MPI_FLOAT, 4};
    case ncclFloat64: return {MPI_DOUBLE, 8};
    case ncclBfloat16: return {MPI_UINT16_T, 2};  // reduced only by the bf16 operations below
    case ncclInt32: return {MPI_INT32_T, 4};
    case ncclUint8: return {MPI_UINT8_T, 1};
    default: break;
  }
  cpu::unsupported((std::string(function) + " with datatype " + std::to_string(type) +
                    " (supported: ncclFloat32, ncclFloat64, ncclBfloat16, ncclInt32, ncclUint8)")
                       .c_str());
}

// bf16 maxima work in fp32 (sums: sum_in_rank_order).
void bf16_max(void* in, void* inout, int* length, MPI_Datatype*) {
  const __nv_bfloat16* a = static_cast<const __nv_bfloat16*>(in);
  __nv_bfloat16* b = static_cast<__nv_bfloat16*>(inout);
  for (int i = 0; i < *length; ++i) b[i] = __float2bfloat16(std::max(__bfloat162float(a[i]), __bfloat162float(b[i])));
}

// out (count) = the rows (size, count) added in rank order, ((row 0 + row 1) + row 2) + ..., each
// partial sum of bf16 rounded to bf16 as NCCL's are. Every sum of this NCCL (all-reduce, reduce,
// reduce-scatter) adds in this one order, whatever the count and whatever part of a buffer a call
// covers: so a ZeRO-1 reduce of part of a bucket gives bitwise what the bucket's all-reduce gives
// (docs/pipeline.md, "ZeRO-1"). MPI's own order depends on its algorithm, chosen by message size.
template <typename T>
void add_rows(T* out, const T* rows, size_t count, int size) {
  for (size_t i = 0; i < count; ++i) {
    T sum = rows[i];
    for (int r = 1; r < size; ++r) sum = sum + rows[size_t(r) * count + i];
    out[i] = sum;
  }
}
void add_rows(__nv_bfloat16* out, const __nv_bfloat16* rows, size_t count, int size) {
  for (size_t i = 0; i < count; ++i) {
    __nv_bfloat16 sum = rows[i];
    for (int r = 1; r < size; ++r) sum = __float2bfloat16(__bfloat162float(sum) + __bfloat162float(rows[r * count + i]));
    out[i] = sum;
  }
}
void sum_in_rank_order(void* out, const void* rows, size_t count, int size, ncclDataType_t type) {
  switch (type) {
    case ncclFloat32: return add_rows(static_cast<float*>(out), static_cast<const float*>(rows), count, size);
    case ncclFloat64: return add_rows(static_cast<double*>(out), static_cast<const double*>(rows), count, size);
    case ncclBfloat16:
      return add_rows(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(rows), count, size);
    case ncclInt32: return add_rows(static_cast<int32_t*>(out), static_cast<const int32_t*>(rows), count, size);
    default: return add_rows(static_cast<uint8_t*>(out), static_cast<const uint8_t*>(rows), count, size);
  }
}

// The MPI operation of op, checked up front. A sum has none: every collective adds its sums in rank
// order itself (sum_in_rank_order) and never gives one to MPI, so MPI_OP_NULL, which MPI refuses.
MPI_Op reduction(ncclRedOp_t op, ncclDataType_t type, const char* function) {
  if (op == ncclSum) return MPI_OP_NULL;
  if (type == ncclBfloat16 && op == ncclMax) {
    // Created on first use: MPI_Op_create needs MPI_Init, which the program calls.
    static MPI_Op max = MPI_OP_NULL;
    if (max == MPI_OP_NULL) MPI_Op_create(bf16_max, /*commute=*/1, &max);
    return max;
  }
  if (op == ncclMax) return MPI_MAX;
  cpu::unsupported((std::string(function) + " with op " + std::to_string(op) + " (supported: ncclSum, ncclMax)").c_str());
}
// cpu::count_nccl_call, and the same on the communicator's own counts (cpu::nccl_comm_counts).
void count_call(ncclComm_t comm, cpu::NcclCall kind, uint64_t bytes) {
  cpu::count_nccl_call(kind, bytes);
  comm->counted.calls += 1;
  comm->counted.bytes += bytes;
}
}  // namespace

cpu::NcclCommCounts cpu::nccl_comm_counts(ncclComm_t comm) { return comm->counted; }

extern "C" {

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclSend"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(peer, comm, "ncclSend", "peer"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclSend");
  const int n = mpi_count(count, "ncclSend");
  count_call(comm, cpu::NcclCall::send, count * e.bytes);
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclSend", "sendbuff"); r != ncclSuccess) return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::send, datatype, count, -1, -1, peer);
  return submit(comm, stream, "ncclSend", signature, [=](Staging& staging) {
    MPI_Request request;
    MPI_Isend(staging.in(sendbuff, count * e.bytes), n, e.mpi, peer, 0, comm->mpi, &request);
    return request;
  });
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclRecv"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(peer, comm, "ncclRecv", "peer"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclRecv");
  const int n = mpi_count(count, "ncclRecv");
  count_call(comm, cpu::NcclCall::recv, 0);
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclRecv", "recvbuff"); r != ncclSuccess) return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::recv, datatype, count, -1, -1, peer);
  return submit(comm, stream, "ncclRecv", signature, [=](Staging& staging) {
    MPI_Request request;
    MPI_Irecv(staging.out(recvbuff, count * e.bytes), n, e.mpi, peer, 0, comm->mpi, &request);
    return request;
  });
}

// In place when sendbuff == recvbuff.
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype,
                           ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllReduce"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclAllReduce");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclAllReduce");
  const int n = mpi_count(count, "ncclAllReduce");
  count_call(comm, cpu::NcclCall::all_reduce, count * e.bytes);
  const bool in_place = sendbuff == recvbuff;
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclAllReduce", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclAllReduce", "recvbuff"); r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::all_reduce, datatype, count, op);
  return submit(comm, stream, "ncclAllReduce", signature, [=](Staging& staging) {
    const size_t bytes = count * e.bytes;
    MPI_Request request;
    if (op == ncclSum) {  // every rank's buffer to every rank, added in rank order (sum_in_rank_order)
      const void* mine = staging.in(sendbuff, bytes);
      void* out = staging.out(recvbuff, bytes, in_place);
      void* rows = staging.scratch(comm_size(comm) * bytes);
      MPI_Iallgather(mine, n, e.mpi, rows, n, e.mpi, comm->mpi, &request);
      staging.then([=] { sum_in_rank_order(out, rows, count, comm_size(comm), datatype); });
      return request;
    }
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, bytes);
    MPI_Iallreduce(in, staging.out(recvbuff, bytes, in_place), n, e.mpi, mpi_op, comm->mpi, &request);
    return request;
  });
}

// sendbuff: (nranks, recvcount); recvbuff: (recvcount), this rank's row of the sum. In place
// (recvbuff inside sendbuff) needs nothing more: MPI gets separate host copies of the two.
ncclResult_t ncclReduceScatter(const void* sendbuff, void* recvbuff, size_t recvcount, ncclDataType_t datatype,
                               ncclRedOp_t op, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclReduceScatter"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclReduceScatter");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclReduceScatter");
  const int n = mpi_count(recvcount, "ncclReduceScatter");
  const size_t send_bytes = comm_size(comm) * recvcount * e.bytes;
  count_call(comm, cpu::NcclCall::reduce_scatter, send_bytes);
  if (ncclResult_t r = check_buffer(sendbuff, send_bytes, comm, "ncclReduceScatter", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, recvcount * e.bytes, comm, "ncclReduceScatter", "recvbuff");
      r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::reduce_scatter, datatype, recvcount, op);
  return submit(comm, stream, "ncclReduceScatter", signature, [=](Staging& staging) {
    MPI_Request request;
    if (op == ncclSum) {  // row r of every rank to rank r, added in rank order (sum_in_rank_order)
      void* out = staging.out(recvbuff, recvcount * e.bytes);
      void* rows = staging.scratch(send_bytes);
      MPI_Ialltoall(staging.in(sendbuff, send_bytes), n, e.mpi, rows, n, e.mpi, comm->mpi, &request);
      staging.then([=] { sum_in_rank_order(out, rows, recvcount, comm_size(comm), datatype); });
      return request;
    }
    MPI_Ireduce_scatter_block(staging.in(sendbuff, send_bytes), staging.out(recvbuff, recvcount * e.bytes), n, e.mpi,
                              mpi_op, comm->mpi, &request);
    return request;
  });
}

// sendbuff: (sendcount); recvbuff: (nranks, sendcount), row r from rank r. In place when
// sendbuff is this rank's row of recvbuff, which is also MPI's in-place form.
ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclAllGather"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclAllGather");
  const int n = mpi_count(sendcount, "ncclAllGather");
  count_call(comm, cpu::NcclCall::all_gather, sendcount * e.bytes);
  const char* own_row = static_cast<const char*>(recvbuff) + comm_rank(comm) * sendcount * e.bytes;
  const bool in_place = sendbuff == own_row;
  if (ncclResult_t r = check_buffer(sendbuff, sendcount * e.bytes, comm, "ncclAllGather", "sendbuff"); r != ncclSuccess)
    return r;
  if (ncclResult_t r = check_buffer(recvbuff, comm_size(comm) * sendcount * e.bytes, comm, "ncclAllGather", "recvbuff");
      r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::all_gather, datatype, sendcount);
  return submit(comm, stream, "ncclAllGather", signature, [=](Staging& staging) {
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, sendcount * e.bytes);
    MPI_Request request;
    MPI_Iallgather(in, n, e.mpi, staging.out(recvbuff, comm_size(comm) * sendcount * e.bytes, in_place), n, e.mpi,
                   comm->mpi, &request);
    return request;
  });
}

// The root's sendbuff is copied to its recvbuff when they differ; MPI broadcasts in place.
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclBroadcast"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(root, comm, "ncclBroadcast", "root"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclBroadcast");
  const int n = mpi_count(count, "ncclBroadcast");
  count_call(comm, cpu::NcclCall::broadcast, count * e.bytes);
  const bool copy_first = comm_rank(comm) == root && sendbuff != recvbuff;
  if (comm_rank(comm) == root)
    if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclBroadcast", "sendbuff"); r != ncclSuccess)
      return r;
  if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclBroadcast", "recvbuff"); r != ncclSuccess)
    return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::broadcast, datatype, count, -1, root);
  return submit(comm, stream, "ncclBroadcast", signature, [=](Staging& staging) {
    if (copy_first) std::memcpy(recvbuff, sendbuff, count * e.bytes);
    MPI_Request request;
    MPI_Ibcast(staging.out(recvbuff, count * e.bytes, comm_rank(comm) == root), n, e.mpi, root, comm->mpi, &request);
    return request;
  });
}

// recvbuff is used only on root; in place when the root's sendbuff == recvbuff.
ncclResult_t ncclReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                        int root, ncclComm_t comm, cudaStream_t stream) {
  if (ncclResult_t r = check_comm(comm, "ncclReduce"); r != ncclSuccess) return r;
  if (ncclResult_t r = check_rank(root, comm, "ncclReduce", "root"); r != ncclSuccess) return r;
  const Element e = element(datatype, "ncclReduce");
  const MPI_Op mpi_op = reduction(op, datatype, "ncclReduce");
  const int n = mpi_count(count, "ncclReduce");
  count_call(comm, cpu::NcclCall::reduce, count * e.bytes);
  const bool is_root = comm_rank(comm) == root, in_place = is_root && sendbuff == recvbuff;
  if (ncclResult_t r = check_buffer(sendbuff, count * e.bytes, comm, "ncclReduce", "sendbuff"); r != ncclSuccess)
    return r;
  if (comm_rank(comm) == root)
    if (ncclResult_t r = check_buffer(recvbuff, count * e.bytes, comm, "ncclReduce", "recvbuff"); r != ncclSuccess)
      return r;
  const cpu::NcclSignature signature = cpu::nccl_signature(cpu::NcclCall::reduce, datatype, count, op, root);
  return submit(comm, stream, "ncclReduce", signature, [=](Staging& staging) {
    const size_t bytes = count * e.bytes;
    MPI_Request request;
    if (op == ncclSum) {  // every rank's buffer to the root, added in rank order (sum_in_rank_order)
      const void* mine = staging.in(sendbuff, bytes);
      void* out = is_root ? staging.out(recvbuff, bytes, in_place) : nullptr;
      void* rows = is_root ? staging.scratch(comm_size(comm) * bytes) : nullptr;
      MPI_Igather(mine, n, e.mpi, rows, n, e.mpi, root, comm->mpi, &request);
      if (is_root) staging.then([=] { sum_in_rank_order(out, rows, count, comm_size(comm), datatype); });
      return request;
    }
    const void* in = in_place ? MPI_IN_PLACE : staging.in(sendbuff, bytes);
    void* out = is_root ? staging.out(recvbuff, bytes, in_place) : nullptr;  // only the root's is used
    MPI_Ireduce(in, out, n, e.mpi, mpi_op, root, comm->mpi, &request);
    return request;
  });
}

}  // extern "C"
