// The vocabulary-parallel token embedding (model/vocab_parallel.h) on 1, 2 and 4 tensor-parallel
// ranks: its gradients against finite differences in double, and its output and gradients against
// the embedding of one process (today's tp = 1 path, kernels/embedding.cuh), which it matches
// bitwise: the forward's sum over the ranks adds one token row and one position row to zeros, and
// the backward adds a slice's rows exactly as the whole backward does. Runs under mpirun -np 4 as
// dp 4 x tp 1, dp 2 x tp 2 and tp 4: every replica checks its own tp group.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/groups.h"
#include "comm/mesh.h"
#include "kernels/embedding.cuh"
#include "model/vocab_parallel.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/mpi/tensor_parallel_groups.h"

namespace {

const cudaStream_t kStream = nullptr;
constexpr int kTensorParallelSizes[] = {1, 2, 4};

struct Shape {
  int B, T, C, Vp, maxT;
};

// Tokens in [0, Vp), with `heavy` on about `share` of the positions (a run longer than the
// backward's segment when there are enough), the same on every rank.
std::vector<int> random_tokens(const Shape& s, uint64_t seed, int heavy, double share) {
  const std::vector<double> u = random_values(size_t(s.B) * s.T, seed, 0.0, 1.0);
  std::vector<int> tokens(u.size());
  for (size_t i = 0; i < u.size(); ++i)
    tokens[i] = u[i] < share ? heavy : std::min(s.Vp - 1, int((u[i] - share) / (1.0 - share) * s.Vp));
  return tokens;
}

// Rows [slice.first, slice.first + slice.columns) of a (Vp, C) table.
std::vector<double> rows_of(const std::vector<double>& table, int C, VocabularySlice slice) {
  return std::vector<double>(table.begin() + size_t(slice.first) * C,
                             table.begin() + size_t(slice.first + slice.columns) * C);
}

struct Embedding {
  std::vector<double> out, dwte, dwpe;  // dwte: this rank's rows (all of them for one process)
};

// Forward, then backward of dout onto dwte and dwpe starting from the given values (+=).
// tp_groups null: embedding_forward and embedding_backward of one process on the whole wte.
template <typename T>
Embedding run_embedding(const CommGroups* tp_groups, const std::vector<double>& wte, const std::vector<double>& wpe,
                        const std::vector<int>& tokens, const std::vector<double>& dout,
                        const std::vector<double>& dwte_before, const std::vector<double>& dwpe_before,
                        const Shape& s) {
  const VocabularySlice slice = tp_groups ? vocabulary_slice(tp_groups->mesh, s.Vp) : VocabularySlice{0, s.Vp};
  DeviceBuffer<T> d_wte(convert<T>(rows_of(wte, s.C, slice))), d_wpe(convert<T>(wpe));
  DeviceBuffer<T> out(size_t(s.B) * s.T * s.C), d_dout(convert<T>(dout));
  DeviceBuffer<T> dwte(convert<T>(rows_of(dwte_before, s.C, slice))), dwpe(convert<T>(dwpe_before));
  DeviceBuffer<int> d_tokens(tokens), workspace(embedding_backward_workspace_size(s.B, s.T, s.C));
  if (tp_groups) {
    vocab_parallel_embedding_forward<T>(*tp_groups, out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B,
                                        s.T, s.C, s.Vp, kStream);
    vocab_parallel_embedding_backward<T>(*tp_groups, dwte.data(), dwpe.data(), workspace.data(), d_dout.data(),
                                         d_tokens.data(), s.B, s.T, s.C, s.Vp, kStream);
  } else {
    embedding_forward<T>(out.data(), d_tokens.data(), d_wte.data(), d_wpe.data(), s.B, s.T, s.C, kStream);
    embedding_backward<T>(dwte.data(), dwpe.data(), workspace.data(), d_dout.data(), d_tokens.data(), s.B, s.T, s.C,
                          kStream);
  }
  return {to_double(out.to_host()), to_double(dwte.to_host()), to_double(dwpe.to_host())};
}

TEST(VocabParallelEmbedding, GradientsMatchFiniteDifferencesOnOneTwoAndFourRanks) {
  const Shape s{2, 3, 4, 8, 4};
  std::vector<double> wte = random_values(size_t(s.Vp) * s.C, 1), wpe = random_values(size_t(s.maxT) * s.C, 2);
  const std::vector<int> tokens = random_tokens(s, 3, 5, 0.3);
  const std::vector<double> projection = random_values(size_t(s.B) * s.T * s.C, 4);  // loss = projection . out
  const std::vector<double> zero_dwte(wte.size(), 0.0), zero_dwpe(wpe.size(), 0.0);
  for (int tp : kTensorParallelSizes) {
    SCOPED_TRACE(testing::Message() << "tp " << tp);
    TensorParallelGroups g(tp);
    const Embedding analytic =
        run_embedding<double>(&g.groups, wte, wpe, tokens, projection, zero_dwte, zero_dwpe, s);
    // Every rank perturbs the same element of the whole wte or wpe in turn (each forward is a collective).
    auto loss_of_wte = [&](const std::vector<double>& x) {
      return project(run_embedding<double>(&g.groups, x, wpe, tokens, projection, zero_dwte, zero_dwpe, s).out,
                     projection);
    };
    auto loss_of_wpe = [&](const std::vector<double>& x) {
      return project(run_embedding<double>(&g.groups, wte, x, tokens, projection, zero_dwte, zero_dwpe, s).out,
                     projection);
    };
    const VocabularySlice slice = vocabulary_slice(g.groups.mesh, s.Vp);
    // The loss is linear: central differences are exact but for rounding (~1e-11 here).
    EXPECT_LE(max_relative_error(analytic.dwte, rows_of(numeric_gradient(loss_of_wte, wte), s.C, slice)), 1e-6);
    EXPECT_LE(max_relative_error(analytic.dwpe, numeric_gradient(loss_of_wpe, wpe)), 1e-6);
  }
}

// Output and accumulated gradients bitwise those of one process, in type T; 640 positions with
// token 13 on 60% of them (a run of more than kEmbeddingSegment = 256 positions: the long runs'
// sums), held by tp rank 1 of 2 and 3 of 4.
template <typename T>
void expect_bitwise_one_process() {
  const Shape s{4, 160, 24, 16, 200};
  const std::vector<double> wte = to_double(convert<T>(random_values(size_t(s.Vp) * s.C, 11)));
  const std::vector<double> wpe = to_double(convert<T>(random_values(size_t(s.maxT) * s.C, 12)));
  const std::vector<double> dout = to_double(convert<T>(random_values(size_t(s.B) * s.T * s.C, 13)));
  const std::vector<double> dwte_before = to_double(convert<T>(random_values(wte.size(), 14)));
  const std::vector<double> dwpe_before = to_double(convert<T>(random_values(wpe.size(), 15)));
  const std::vector<int> tokens = random_tokens(s, 16, 13, 0.6);
  const Embedding one_process = run_embedding<T>(nullptr, wte, wpe, tokens, dout, dwte_before, dwpe_before, s);
  for (int tp : kTensorParallelSizes) {
    SCOPED_TRACE(testing::Message() << "tp " << tp);
    TensorParallelGroups g(tp);
    const Embedding sliced = run_embedding<T>(&g.groups, wte, wpe, tokens, dout, dwte_before, dwpe_before, s);
    EXPECT_EQ(sliced.out, one_process.out);
    EXPECT_EQ(sliced.dwte, rows_of(one_process.dwte, s.C, vocabulary_slice(g.groups.mesh, s.Vp)));
    EXPECT_EQ(sliced.dwpe, one_process.dwpe) << "every tp rank's wpe gradient, bitwise";
  }
}

TEST(VocabParallelEmbedding, DoubleIsBitwiseTheEmbeddingOfOneProcess) { expect_bitwise_one_process<double>(); }
TEST(VocabParallelEmbedding, FloatIsBitwiseTheEmbeddingOfOneProcess) { expect_bitwise_one_process<float>(); }

}  // namespace
