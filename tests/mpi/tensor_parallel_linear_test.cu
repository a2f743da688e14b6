// The column- and row-parallel linear layers (model/tensor_parallel_linear.h) in the two blocks
// they make, on 1, 2 and 4 tensor-parallel ranks: an MLP, fc1 (column) -> GELU -> fc2 (row), and
// an attention, QKV (column, by heads) -> attention on the rank's heads -> projection (row).
// Against the same blocks of one process on today's kernels (matmul, gelu, attention): the
// output, the input gradient and every weight and bias gradient (the slices gathered to the full
// layers), bitwise at tp = 1, within the stated tolerance at tp 2 and 4; the MLP's gradients
// against finite differences in double at tp = 2; what is replicated bitwise equal on every tp
// rank; the slices' rows and columns and their one-line errors. Runs under mpirun -np 4 as
// dp 4 x tp 1, dp 2 x tp 2 and tp 4: every replica checks its own tp group.
#include <gtest/gtest.h>
#include <mpi.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/attention.cuh"
#include "kernels/cublas_check.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/gelu.cuh"
#include "kernels/matmul.cuh"
#include "model/tensor_parallel_linear.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/mpi/tensor_parallel_groups.h"
#include "tests/scaled_error.h"

namespace {

constexpr int kTensorParallelSizes[] = {1, 2, 4};

// A full layer and the gradients its backward adds onto (+=).
struct Layer {
  std::vector<double> weight, bias, dweight, dbias;  // (OC, C), (OC), (OC, C), (OC)
};
Layer random_layer(int C, int OC, uint64_t seed) {
  return {random_values(size_t(OC) * C, seed), random_values(OC, seed + 1), random_values(size_t(OC) * C, seed + 2),
          random_values(OC, seed + 3)};
}

// A block: heads == 0 is the MLP (C -> 4 C -> C), heads > 0 the attention (C -> 3 C -> C).
struct Block {
  int B, T, C, heads;
  std::vector<double> inp, dout;  // (B T, C) each
  Layer first, second;            // fc1 or QKV (column-parallel); fc2 or the projection (row-parallel)
};
Block random_block(int B, int T, int C, int heads, uint64_t seed) {
  const int hidden = heads == 0 ? 4 * C : 3 * C, second_in = heads == 0 ? 4 * C : C;
  const size_t BTC = size_t(B) * T * C;
  return {B, T, C, heads, random_values(BTC, seed), random_values(BTC, seed + 1),
          random_layer(C, hidden, seed + 2), random_layer(second_in, C, seed + 6)};
}

// What a run gives: every tp rank's output and input gradient, the gradients gathered to the full
// layers, and the row-parallel bias gradient as this rank holds it.
struct BlockGradients {
  std::vector<double> out, dinp, dweight1, dbias1, dweight2, dbias2;
};

// A layer's slice on the device: weight and bias, and the gradients before the backward.
template <typename T>
struct DeviceLayer {
  DeviceLayer(const LinearSlice& s, const Layer& full)
      : weight(cut(s, full.weight, full.bias, true)), bias(cut(s, full.weight, full.bias, false)),
        dweight(cut(s, full.dweight, full.dbias, true)), dbias(cut(s, full.dweight, full.dbias, false)) {}
  static std::vector<T> cut(const LinearSlice& s, const std::vector<double>& weight, const std::vector<double>& bias,
                            bool of_weight) {
    std::vector<double> weight_slice(size_t(s.local_out()) * s.local_in()), bias_slice(s.local_out());
    cut_linear_slice(s, weight_slice.data(), bias_slice.data(), weight.data(), bias.data());
    return convert<T>(of_weight ? weight_slice : bias_slice);
  }
  DeviceBuffer<T> weight, bias, dweight, dbias;
};

// The full layer's gradients from every tp rank's slice: each places its own in zeros and the
// sum over tp adds one value and zeros to each element, exactly. The row-parallel bias is whole on
// every rank: returned as this rank holds it.
template <typename T>
void gather_gradients(const CommGroups& groups, const LinearSlice& s, const DeviceLayer<T>& layer,
                      std::vector<double>& dweight, std::vector<double>& dbias) {
  const std::vector<double> dweight_slice = to_double(layer.dweight.to_host());
  const std::vector<double> dbias_slice = to_double(layer.dbias.to_host());
  dweight.assign(size_t(s.out_channels) * s.in_channels, 0.0);
  dbias.assign(s.out_channels, 0.0);
  place_linear_slice(s, dweight.data(), dbias.data(), dweight_slice.data(), dbias_slice.data());
  DeviceBuffer<double> sum(dweight.size() + dbias.size());
  std::vector<double> both = dweight;
  both.insert(both.end(), dbias.begin(), dbias.end());
  sum.upload(both);
  allreduce_tensor_parallel(groups, sum.data(), s.column_parallel ? both.size() : dweight.size(), ncclFloat64, ncclSum,
                            nullptr);
  both = sum.to_host();
  dweight.assign(both.begin(), both.begin() + dweight.size());
  dbias.assign(both.begin() + dweight.size(), both.end());
}

// The block forward and backward in type T. tp_groups null: one process on today's kernels
// (matmul_forward, matmul_backward_*), the whole layers; otherwise this rank's slices through the
// tensor-parallel layers. On a stream of its own, so the column-parallel backward's overlap has a
// compute stream to order against; the input gradient is read by a copy queued on that stream
// after the backward, as the next layer's backward would read it.
template <typename T>
BlockGradients run_block(const CommGroups* tp_groups, const Block& b) {
  const int tp = tp_groups ? tp_groups->mesh.tp : 1, rank = tp_groups ? tp_groups->mesh.tp_rank : 0;
  const bool mlp = b.heads == 0;
  const int N = b.B * b.T;
  const LinearSlice first =
      mlp ? column_parallel_slice(tp, rank, b.C, 4 * b.C) : attention_qkv_slice(tp, rank, b.C, b.heads);
  const LinearSlice second = row_parallel_slice(tp, rank, mlp ? 4 * b.C : b.C, b.C);
  const int hidden = first.local_out(), inner = second.local_in(), heads = b.heads / tp;  // this rank's
  cudaStream_t stream;
  CUDA_CHECK(cudaStreamCreate(&stream));
  CublasHandle cublas;
  CUBLAS_CHECK(cublasSetStream(cublas, stream));
  TensorParallelOverlap overlap = create_tensor_parallel_overlap();
  DeviceLayer<T> l1(first, b.first), l2(second, b.second);
  DeviceBuffer<T> inp(convert<T>(b.inp)), dout(convert<T>(b.dout)), out(b.inp.size()), dinp(b.inp.size()),
      dinp_read(b.inp.size());
  DeviceBuffer<T> h(size_t(N) * hidden), dh(size_t(N) * hidden), a(size_t(N) * inner), da(size_t(N) * inner);
  DeviceBuffer<T> saved(mlp ? 1 : attention_saved_size(b.B, b.T, inner, heads));
  DeviceBuffer<T> scratch(mlp ? 1 : attention_backward_scratch_size(b.B, b.T, inner, heads));
  DeviceBuffer<Compute<T>> workspace(matmul_bias_gradient_workspace_size(N, hidden > b.C ? hidden : b.C));
  if (tp_groups) {
    column_parallel_forward(cublas, first, h.data(), inp.data(), l1.weight.data(), l1.bias.data(), N, stream);
  } else {
    matmul_forward(cublas, h.data(), inp.data(), l1.weight.data(), l1.bias.data(), N, b.C, hidden, stream);
  }
  if (mlp) gelu_forward(a.data(), h.data(), size_t(N) * hidden, stream);
  else attention_forward(cublas, a.data(), saved.data(), scratch.data(), h.data(), b.B, b.T, inner, heads, stream);
  if (tp_groups) {
    row_parallel_forward(*tp_groups, cublas, second, out.data(), a.data(), l2.weight.data(), l2.bias.data(), N, stream);
    row_parallel_backward(cublas, second, da.data(), l2.dweight.data(), l2.dbias.data(), workspace.data(), dout.data(),
                          a.data(), l2.weight.data(), N, stream);
  } else {
    matmul_forward(cublas, out.data(), a.data(), l2.weight.data(), l2.bias.data(), N, inner, b.C, stream);
    matmul_backward_input(cublas, da.data(), dout.data(), l2.weight.data(), N, inner, b.C, stream);
    matmul_backward_weight(cublas, l2.dweight.data(), l2.dbias.data(), workspace.data(), dout.data(), a.data(), N,
                           inner, b.C, stream);
  }
  if (mlp) gelu_backward(dh.data(), h.data(), da.data(), size_t(N) * hidden, stream);
  else attention_backward(cublas, dh.data(), scratch.data(), da.data(), saved.data(), b.B, b.T, inner, heads, stream);
  if (tp_groups) {
    column_parallel_backward(*tp_groups, cublas, first, dinp.data(), l1.dweight.data(), l1.dbias.data(),
                             workspace.data(), dh.data(), inp.data(), l1.weight.data(), N, overlap, stream);
  } else {
    matmul_backward_input(cublas, dinp.data(), dh.data(), l1.weight.data(), N, b.C, hidden, stream);
    matmul_backward_weight(cublas, l1.dweight.data(), l1.dbias.data(), workspace.data(), dh.data(), inp.data(), N,
                           b.C, hidden, stream);
  }
  const size_t dinp_bytes = b.inp.size() * sizeof(T);
  CUDA_CHECK(cudaMemcpyAsync(dinp_read.data(), dinp.data(), dinp_bytes, cudaMemcpyDeviceToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  BlockGradients result;
  result.out = to_double(out.to_host()), result.dinp = to_double(dinp_read.to_host());
  if (tp_groups) {
    gather_gradients(*tp_groups, first, l1, result.dweight1, result.dbias1);
    gather_gradients(*tp_groups, second, l2, result.dweight2, result.dbias2);
  } else {
    result.dweight1 = to_double(l1.dweight.to_host()), result.dbias1 = to_double(l1.dbias.to_host());
    result.dweight2 = to_double(l2.dweight.to_host()), result.dbias2 = to_double(l2.dbias.to_host());
  }
  destroy_tensor_parallel_overlap(overlap);
  CUDA_CHECK(cudaStreamDestroy(stream));
  return result;
}

template <typename Make>
std::string message_of(Make make) {
  try {
    make();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "no error";
}

// weight[o, c] = 100 o + c and bias[o] = o, so a slice's values name their rows and columns.
struct NamedLayer {
  NamedLayer(int C, int OC) : weight(size_t(OC) * C), bias(OC) {
    for (int o = 0; o < OC; ++o) {
      bias[o] = o;
      for (int c = 0; c < C; ++c) weight[size_t(o) * C + c] = 100.0 * o + c;
    }
  }
  std::vector<double> weight, bias;
};

struct Cut {
  std::vector<double> weight, bias;
};
Cut cut_of(const LinearSlice& s, const NamedLayer& full) {
  Cut cut{std::vector<double>(size_t(s.local_out()) * s.local_in()), std::vector<double>(s.local_out())};
  cut_linear_slice(s, cut.weight.data(), cut.bias.data(), full.weight.data(), full.bias.data());
  return cut;
}

TEST(TensorParallelLinear, QkvSliceHoldsItsOwnHeadsRowsOfQAndKAndV) {
  // C = 8 in NH = 4 heads of 2 channels; tp rank 1 of 2 holds heads 2 and 3: channels 4..7 of
  // q (rows 0..7 of the 3 C), of k (8..15) and of v (16..23), not the contiguous rows 12..23.
  const Cut cut = cut_of(attention_qkv_slice(2, 1, 8, 4), NamedLayer(8, 24));
  EXPECT_EQ(cut.bias, (std::vector<double>{4, 5, 6, 7, 12, 13, 14, 15, 20, 21, 22, 23}));
  for (int row = 0; row < 12; ++row)
    for (int c = 0; c < 8; ++c) EXPECT_EQ(cut.weight[row * 8 + c], 100.0 * cut.bias[row] + c) << row << " " << c;
}

TEST(TensorParallelLinear, RowSliceHoldsItsInputColumnsAndTheWholeBias) {
  // fc2 of C = 2 (8 -> 2) at tp 4: rank 2 holds input columns 4 and 5 of both rows.
  const Cut cut = cut_of(row_parallel_slice(4, 2, 8, 2), NamedLayer(8, 2));
  EXPECT_EQ(cut.weight, (std::vector<double>{4, 5, 104, 105}));
  EXPECT_EQ(cut.bias, (std::vector<double>{0, 1}));
}

TEST(TensorParallelLinear, EveryRanksSlicePlacedGivesBackTheFullLayer) {
  for (int tp : kTensorParallelSizes)
    for (int kind = 0; kind < 3; ++kind) {  // fc1 (12 -> 48), QKV (12 -> 36 in 4 heads), fc2 (48 -> 12)
      const int C = kind == 2 ? 48 : 12, OC = kind == 0 ? 48 : kind == 1 ? 36 : 12;
      const NamedLayer full(C, OC);
      NamedLayer placed(C, OC);
      placed.weight.assign(placed.weight.size(), -1.0);
      placed.bias.assign(placed.bias.size(), -1.0);
      for (int rank = 0; rank < tp; ++rank) {
        const LinearSlice s = kind == 0   ? column_parallel_slice(tp, rank, C, OC)
                              : kind == 1 ? attention_qkv_slice(tp, rank, C, 4)
                                          : row_parallel_slice(tp, rank, C, OC);
        const Cut cut = cut_of(s, full);
        place_linear_slice(s, placed.weight.data(), placed.bias.data(), cut.weight.data(), cut.bias.data());
      }
      EXPECT_EQ(placed.weight, full.weight) << "tp " << tp << " kind " << kind;
      EXPECT_EQ(placed.bias, full.bias) << "tp " << tp << " kind " << kind;
    }
}

TEST(TensorParallelLinear, BadSizesThrowOneLine) {
  EXPECT_EQ(message_of([] { column_parallel_slice(3, 0, 8, 32); }),
            "tensor-parallel linear layer: the output channels OC = 32 do not split into 3 equal parts");
  EXPECT_EQ(message_of([] { row_parallel_slice(4, 0, 6, 8); }),
            "tensor-parallel linear layer: the input channels C = 6 do not split into 4 equal parts");
  EXPECT_EQ(message_of([] { attention_qkv_slice(4, 0, 12, 6); }),
            "tensor-parallel linear layer: the attention heads NH = 6 do not split into 4 equal parts");
  EXPECT_EQ(message_of([] { column_parallel_slice(2, 2, 8, 8); }),
            "tensor-parallel linear layer: tp rank 2 of tp = 2 (tp >= 1, 0 <= tp rank < tp)");
}

// The MLP block's gradients in double at tp = 2 against central differences of loss = dout . out,
// every tp rank perturbing the same element of the full layers in turn (each forward is a
// collective); the analytic gradients start from zero. C = 2 (fc1 2 -> 8, fc2 8 -> 2, each rank
// half of the 8), N = 2: 46 parameters and inputs, 92 collective runs of the block.
TEST(TensorParallelLinear, MlpGradientsMatchFiniteDifferencesOnTwoRanks) {
  Block b = random_block(1, 2, 2, 0, 101);
  b.first.dweight.assign(b.first.dweight.size(), 0.0), b.first.dbias.assign(b.first.dbias.size(), 0.0);
  b.second.dweight.assign(b.second.dweight.size(), 0.0), b.second.dbias.assign(b.second.dbias.size(), 0.0);
  TensorParallelGroups g(2);
  const BlockGradients analytic = run_block<double>(&g.groups, b);
  using Field = std::vector<double>& (*)(Block&);
  struct Case {
    const char* name;
    const std::vector<double>& analytic;
    Field of;  // the block's vector that the gradient is of
  };
  const Case cases[] = {
      {"dinp", analytic.dinp, [](Block& c) -> std::vector<double>& { return c.inp; }},
      {"dweight1", analytic.dweight1, [](Block& c) -> std::vector<double>& { return c.first.weight; }},
      {"dbias1", analytic.dbias1, [](Block& c) -> std::vector<double>& { return c.first.bias; }},
      {"dweight2", analytic.dweight2, [](Block& c) -> std::vector<double>& { return c.second.weight; }},
      {"dbias2", analytic.dbias2, [](Block& c) -> std::vector<double>& { return c.second.bias; }}};
  for (const Case& k : cases) {
    Block changed = b;
    std::vector<double> x = k.of(changed);
    const auto loss = [&](const std::vector<double>& values) {
      k.of(changed) = values;
      return project(run_block<double>(&g.groups, changed).out, b.dout);
    };
    // Central differences in double: truncation and rounding both below 1e-9 (tests/gradient_check.h).
    EXPECT_LE(max_relative_error(k.analytic, numeric_gradient(loss, x)), 1e-6) << k.name;
  }
}

// The MLP (heads 0) and the attention block against one process on today's kernels, in type T:
// bitwise at tp = 1, within tolerance (of the reference's scale) at tp 2 and 4. C = 48 in 4 heads.
template <typename T>
void expect_blocks_match_one_process(double tolerance) {
  for (int heads : {0, 4}) {
    SCOPED_TRACE(heads == 0 ? "MLP" : "attention");
    const Block b = random_block(2, 16, 48, heads, 200 + heads);
    const BlockGradients one_process = run_block<T>(nullptr, b);
    for (int tp : sizes_dividing_the_world({1, 2, 4})) {
      SCOPED_TRACE(testing::Message() << "tp " << tp);
      TensorParallelGroups g(tp);
      const BlockGradients sliced = run_block<T>(&g.groups, b);
      const std::vector<double> BlockGradients::*fields[] = {&BlockGradients::out,      &BlockGradients::dinp,
                                                             &BlockGradients::dweight1, &BlockGradients::dbias1,
                                                             &BlockGradients::dweight2, &BlockGradients::dbias2};
      const char* names[] = {"out", "dinp", "dweight1", "dbias1", "dweight2", "dbias2"};
      for (int f = 0; f < 6; ++f) {
        // The row-parallel bias gradient sums the same replicated dout in the same kernel: bitwise.
        if (tp == 1 || f == 5) EXPECT_EQ(sliced.*fields[f], one_process.*fields[f]) << names[f];
        else EXPECT_LE(max_error_relative_to_scale(sliced.*fields[f], one_process.*fields[f]), tolerance) << names[f];
      }
    }
  }
}

// At tp > 1 the results differ from one process's only in the order of their sums: the row-parallel
// output adds tp partial sums of 4 C / tp (MLP) or C / tp products, the column-parallel input
// gradient tp partial sums over its outputs, and the GEMMs of other shapes may block their sums
// otherwise. A sum of K terms rounded in order is within K u of the terms' magnitudes (u = 2^-53
// double, 2^-24 fp32), about sqrt(K) u when the roundings' signs are random; here K <= 4 C = 192
// and the terms' magnitudes are a few times the scale. Double: 1e-12 (measured 7.4e-16 at most,
// CPU build, 2026-11-27). fp32: 1e-5, the worst case's K u = 1.1e-5 (measured 5.4e-7 at most), so
// GPU kernels that sum in other orders still pass; a wrong slice, bias or sum is off by the
// order of the scale itself.
TEST(TensorParallelLinear, DoubleBlocksMatchOneProcess) { expect_blocks_match_one_process<double>(1e-12); }
TEST(TensorParallelLinear, FloatBlocksMatchOneProcess) { expect_blocks_match_one_process<float>(1e-5); }

// What is replicated over the tp ranks is bitwise the same on every one: the row-parallel
// output (after the sum, the same bias added), the column-parallel input gradient (after its
// sum), and the row-parallel bias gradient (the same replicated dout through the same kernel).
// Every rank's value equal to the group's maximum means all are equal.
TEST(TensorParallelLinear, ReplicatedResultsAreBitwiseEqualOnEveryTpRank) {
  for (int heads : {0, 4})
    for (int tp : sizes_dividing_the_world({2, 4})) {
      TensorParallelGroups g(tp);
      const BlockGradients sliced = run_block<float>(&g.groups, random_block(2, 8, 16, heads, 300));
      for (const std::vector<double>* v : {&sliced.out, &sliced.dinp, &sliced.dbias2}) {
        DeviceBuffer<double> largest(*v);
        allreduce_tensor_parallel(g.groups, largest.data(), v->size(), ncclFloat64, ncclMax, nullptr);
        EXPECT_EQ(largest.to_host(), *v) << "tp " << tp << " heads " << heads;
      }
    }
}

}  // namespace
