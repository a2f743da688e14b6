// The GPT on tensor-parallel ranks (model/gpt.cuh with a TensorParallelRun): a small model, whole
// on one stage, run at tp 1, 2 and 4 against the same model on one process. Its loss and every
// parameter's gradient (each rank's slices placed back into llm.c's layout) match one process's
// within the sum orders' tolerance, bitwise at tp 1; the loss and the replicated parameters'
// gradients are bitwise equal on every tp rank; the model cut into two ranges gives bitwise the
// whole range's step at the same tp; the split backward (I then W) gives bitwise the fused
// backward's step at the same tp, whole and cut. The fused attention's model (heads of 16
// channels) matches one process in double at tp 2 and 4. With sequence parallelism (the
// SequenceParallelGpt tests at the end) the same, and bitwise the tp run without it but for the
// LayerNorms' gradients.
// Runs under mpirun -np 4 as dp 4 x tp 1, dp 2 x tp 2 and tp 4: every replica checks its own tp group.
#include <gtest/gtest.h>
#include <mpi.h>

#include <vector>

#include "comm/nccl_types.h"
#include "comm/tensor_parallel.h"
#include "kernels/cuda_check.cuh"
#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/tensor_parallel_linear.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/mpi/tensor_parallel_groups.h"
#include "tests/scaled_error.h"

namespace {

const cudaStream_t kStream = nullptr;
// L=2, NH=4, C=16, maxT=8, V=100 (Vp=128): tp 2 and 4 divide the heads, 4 C and Vp; V < Vp, so
// the padded columns are on the last slice.
const GPTConfig kConfig = make_gpt_config(2, 4, 16, 8, 100);
constexpr int kB = 2, kT = 8;
// The model a test runs and its attention. The fused attention takes heads of 16 channels or more
// (kernels/fused_attention.cuh): its model is kConfig with C = 64.
struct Model {
  GPTConfig config;
  AttentionKind attention;
};
const Model kMaterialized{kConfig, AttentionKind::materialized};
const Model kFused{make_gpt_config(2, 4, 64, 8, 100), AttentionKind::fused};

// Every parameter random (the biases too, so that one added tp times shows), each a float, so
// that the double and float runs start from the same values.
std::vector<double> random_model(const Model& m = kMaterialized) {
  std::vector<double> values = random_values(num_parameters(m.config), 33, -0.5, 0.5);
  for (double& v : values) v = double(float(v));
  return values;
}

std::vector<int> random_tokens(uint64_t seed) {
  std::vector<int> tokens;
  for (const double u : random_values(size_t(kB) * kT, seed, 0.0, 1.0))
    tokens.push_back(int(u * kConfig.vocab_size));
  return tokens;
}

bool is_replicated(const ParameterRegion& r) { return !r.cut && r.tensor != kWte; }

struct GptResult {
  double loss;                      // the mean over the B T tokens
  std::vector<double> stage_grads;  // the rank's gradients in its (first) range's stage layout
  std::vector<double> grads;        // every rank's gradients placed in llm.c's layout
  ParameterLayout layout;           // the (first) range's
};

// A range's parameters cut from the model for the run's tp rank, zero gradients, activations and
// scratch.
template <typename T>
struct Stage {
  Stage(const Model& m, const LayerRange& range, const TensorParallelRun& tp, const std::vector<double>& model)
      : range(range),
        layout(parameter_layout(m.config, {range}, {tp.tp(), tp.rank()})),
        params(convert<T>(to_stage_layout(layout, model))),
        grads(convert<T>(std::vector<double>(layout.size, 0.0))),
        acts(create_activations<T>(m.config, kB, kT, range, tp.tp(), m.attention, tp.sequence_parallel)),
        scratch(create_backward_scratch<T>(m.config, kB, kT, range, tp.tp(), m.attention, tp.sequence_parallel)) {}
  ~Stage() {
    destroy_backward_scratch(scratch);
    destroy_activations(acts);
  }
  ParameterTensors<T> p() { return chunk_views(params.data(), layout, 0); }
  ParameterTensors<T> g() { return chunk_views(grads.data(), layout, 0); }
  std::vector<double> stage_grads() const {
    std::vector<double> values;
    for (const T value : grads.to_host()) values.push_back(double(value));
    return values;
  }

  LayerRange range;
  ParameterLayout layout;
  DeviceBuffer<T> params, grads;
  Activations<T> acts;
  BackwardScratch<T> scratch;
};

// The stage's gradients in llm.c's layout with every tp rank's slices: each rank's slices and (from
// tp rank 0 alone) the replicated tensors, zeros elsewhere, summed over the tp ranks in double
// (x + 0 = x, so the sum is the gradients themselves). Collective over the tp ranks.
std::vector<double> gathered(const TensorParallelRun& tp, const ParameterLayout& layout,
                             std::vector<double> stage_grads) {
  for (const ParameterRegion& r : layout.regions)
    if (is_replicated(r) && tp.rank() != 0)
      std::fill(stage_grads.begin() + r.offset, stage_grads.begin() + r.offset + r.count, 0.0);
  DeviceBuffer<double> full(to_full_layout(layout, stage_grads));
  if (tp.groups) allreduce_tensor_parallel(*tp.groups, full.data(), full.size(), ncclFloat64, ncclSum, kStream);
  return full.to_host();
}

// Which backward a run takes: gpt_backward, or gpt_backward_input then gpt_backward_weight.
enum class Backward { fused, split };

// The stage's backward after its forward, of the kind asked; the split one through a
// weight-gradient-input buffer made for the stage's tp.
template <typename T>
void backward(Backward kind, const GPTConfig& config, Stage<T>& stage, T* grad_wte_head, const int* tokens,
              const T* input, const T* grad_output, T* grad_input, cublasHandle_t cublas, const TensorParallelRun& tp) {
  if (kind == Backward::fused) {
    gpt_backward<T>(config, stage.range, stage.p(), stage.g(), grad_wte_head, stage.acts, stage.scratch, tokens, input,
                    grad_output, grad_input, kB, kT, cublas, kStream, {}, tp);
    return;
  }
  WeightGradientInputs<T> w =
      create_weight_gradient_inputs<T>(config, kB, kT, stage.range, tp.tp(), tp.sequence_parallel);
  gpt_backward_input<T>(config, stage.range, stage.p(), stage.acts, stage.scratch, tokens, input, grad_output,
                        grad_input, w, kB, kT, cublas, kStream, tp);
  gpt_backward_weight<T>(config, stage.range, stage.g(), grad_wte_head, w, stage.scratch, kB, kT, cublas, kStream, {},
                         tp);
  CUDA_CHECK(cudaStreamSynchronize(kStream));
  destroy_weight_gradient_inputs(w);
}

TensorParallelRun run_on(const CommGroups* groups, bool sequence_parallel) {
  TensorParallelRun tp;
  tp.groups = groups;
  tp.sequence_parallel = sequence_parallel;
  if (tp.tp() > 1) tp.overlap = create_tensor_parallel_overlap();
  return tp;
}

// One forward with targets and one backward of the whole model from zero gradients, at the tp of
// groups (nullptr: one process, no groups). Collective over groups' tp ranks.
template <typename T>
GptResult run_gpt(const CommGroups* groups, const std::vector<double>& model, const Model& m = kMaterialized,
                  Backward kind = Backward::fused, bool sequence_parallel = false) {
  const GPTConfig& config = m.config;
  TensorParallelRun tp = run_on(groups, sequence_parallel);
  Stage<T> whole(m, whole_model(config), tp, model);
  DeviceBuffer<T> grad_wte_head(convert<T>(std::vector<double>(size_t(config.padded_vocab_size) / tp.tp() *
                                                               config.channels, 0.0)));
  DeviceBuffer<int> tokens(random_tokens(1)), targets(random_tokens(2));
  CublasHandle cublas;
  gpt_forward<T>(config, whole.range, whole.p(), whole.acts, tokens.data(), nullptr, targets.data(), 1.0 / (kB * kT),
                 kB, kT, cublas, kStream, tp);
  const double loss = mean_loss(whole.acts, kB, kT, kStream);
  backward<T>(kind, config, whole, grad_wte_head.data(), tokens.data(), nullptr, nullptr, nullptr, cublas, tp);
  sum_tied_embedding_gradient<T>(config, whole.g().wte, grad_wte_head.data(), kStream, tp.tp());
  CUDA_CHECK(cudaStreamSynchronize(kStream));
  destroy_tensor_parallel_overlap(tp.overlap);
  const std::vector<double> stage_grads = whole.stage_grads();
  return {loss, stage_grads, gathered(tp, whole.layout, stage_grads), whole.layout};
}

// The same step cut into two ranges, as two pipeline stages would run it on one rank: layer 0 with
// the embedding, then layer 1 with the head, the second's input gradient the first's output
// gradient, the head's share of wte's gradient added to the first's.
template <typename T>
GptResult run_two_ranges(const CommGroups* groups, const std::vector<double>& model,
                         Backward kind = Backward::fused, bool sequence_parallel = false) {
  TensorParallelRun tp = run_on(groups, sequence_parallel);
  Stage<T> first(kMaterialized, {0, 1, true, false}, tp, model), last(kMaterialized, {1, 2, false, true}, tp, model);
  DeviceBuffer<T> grad_wte_head(convert<T>(std::vector<double>(size_t(kConfig.padded_vocab_size) / tp.tp() *
                                                               kConfig.channels, 0.0)));
  DeviceBuffer<T> grad_between(size_t(kB) * kT * kConfig.channels);
  DeviceBuffer<int> tokens(random_tokens(1)), targets(random_tokens(2));
  CublasHandle cublas;
  gpt_forward<T>(kConfig, first.range, first.p(), first.acts, tokens.data(), nullptr, nullptr, 0.0, kB, kT, cublas,
                 kStream, tp);
  gpt_forward<T>(kConfig, last.range, last.p(), last.acts, nullptr, range_output(first.acts), targets.data(),
                 1.0 / (kB * kT), kB, kT, cublas, kStream, tp);
  const double loss = mean_loss(last.acts, kB, kT, kStream);
  backward<T>(kind, kConfig, last, grad_wte_head.data(), nullptr, range_output(first.acts), nullptr,
              grad_between.data(), cublas, tp);
  backward<T>(kind, kConfig, first, nullptr, tokens.data(), nullptr, grad_between.data(), nullptr, cublas, tp);
  sum_tied_embedding_gradient<T>(kConfig, first.g().wte, grad_wte_head.data(), kStream, tp.tp());
  CUDA_CHECK(cudaStreamSynchronize(kStream));
  destroy_tensor_parallel_overlap(tp.overlap);
  // The last range's wte is the head's tied copy, whose gradient stays zero: the sum of the two
  // ranges' gradients is each one's own.
  std::vector<double> grads = gathered(tp, first.layout, first.stage_grads());
  const std::vector<double> of_last = gathered(tp, last.layout, last.stage_grads());
  for (size_t i = 0; i < grads.size(); ++i) grads[i] += of_last[i];
  return {loss, first.stage_grads(), grads, first.layout};
}

// Tensor `tensor`'s elements of a whole model in llm.c's layout.
std::vector<double> tensor_of(const std::vector<double>& model, int tensor, const GPTConfig& config = kConfig) {
  const size_t at = parameter_tensor_offsets(config)[tensor], count = parameter_tensor_sizes(config)[tensor];
  return std::vector<double>(model.begin() + at, model.begin() + at + count);
}

template <typename T>
void expect_matches_one_process(double tolerance, const Model& m = kMaterialized, bool sequence_parallel = false) {
  const std::vector<double> model = random_model(m);
  const GptResult one_process = run_gpt<T>(nullptr, model, m);
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult sliced = run_gpt<T>(&g.groups, model, m, Backward::fused, sequence_parallel);
    EXPECT_LE(std::abs(sliced.loss - one_process.loss) / std::abs(one_process.loss), tolerance) << "tp " << tp;
    for (int tensor = 0; tensor < kNumParameterTensors; ++tensor)
      EXPECT_LE(max_error_relative_to_scale(tensor_of(sliced.grads, tensor, m.config),
                                            tensor_of(one_process.grads, tensor, m.config)),
                tolerance)
          << "tp " << tp << ": the gradient of " << parameter_tensor_name(tensor);
  }
}

TEST(TensorParallelGpt, TpOneIsBitwiseOneProcess) {
  const std::vector<double> model = random_model();
  TensorParallelGroups g(1);
  const GptResult one_process = run_gpt<float>(nullptr, model), with_groups = run_gpt<float>(&g.groups, model);
  EXPECT_EQ(with_groups.loss, one_process.loss);
  EXPECT_EQ(with_groups.grads, one_process.grads);
}

// The sums that tp changes (docs/pipeline.md, "Their tolerance"): the row-parallel outputs (K = 4C
// = 64 terms), the column-parallel input gradients (K <= 4C), the head's input gradient (K = Vp =
// 128) and the loss's sum of exponentials (per slice, then over the ranks), each within K u of its
// terms' magnitudes, carried through two blocks and the softmax. Double: K u = 1.4e-14, 1e-12 with
// room for that carrying and for GPU GEMMs' orders; float: K u = 7.6e-6, 2e-5. Measured (CPU build,
// 2026-11-27, relative to each tensor's scale): at most 1.0e-15 in double, 4.2e-7 in float. A
// wrong slice, bias or sum is off by the order of the scale itself.
TEST(TensorParallelGpt, DoubleLossAndEveryGradientMatchOneProcess) { expect_matches_one_process<double>(1e-12); }

TEST(TensorParallelGpt, FloatLossAndEveryGradientMatchOneProcess) { expect_matches_one_process<float>(2e-5); }

// The fused attention on NH / tp heads of C / tp channels (the model with C = 64, heads of 16):
// each head's attention is the same computation at any tp, so only the sums above change, K up to
// 4C = 256 terms: K u = 2.8e-14 in double, within the same 1e-12.
TEST(TensorParallelGpt, FusedAttentionDoubleLossAndEveryGradientMatchOneProcess) {
  expect_matches_one_process<double>(1e-12, kFused);
}

// The loss is computed on every rank from the same reduced values, and the replicated parameters'
// gradients from replicated values (the residual stream's gradient, the summed input gradients)
// by the same kernels: bitwise equal on every tp rank, as the replicas must stay equal.
void expect_loss_and_replicated_gradients_equal_on_every_tp_rank(bool sequence_parallel) {
  const std::vector<double> model = random_model();
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult result = run_gpt<float>(&g.groups, model, kMaterialized, Backward::fused, sequence_parallel);
    DeviceBuffer<double> largest_loss(std::vector<double>{result.loss});
    DeviceBuffer<double> largest(result.stage_grads);  // replicated regions sit at the same offsets on every rank
    allreduce_tensor_parallel(g.groups, largest_loss.data(), 1, ncclFloat64, ncclMax, kStream);
    allreduce_tensor_parallel(g.groups, largest.data(), largest.size(), ncclFloat64, ncclMax, kStream);
    EXPECT_EQ(largest_loss.to_host()[0], result.loss) << "tp " << tp;
    const std::vector<double> most = largest.to_host();
    for (const ParameterRegion& r : result.layout.regions) {
      if (!is_replicated(r)) continue;
      EXPECT_EQ(std::vector<double>(most.begin() + r.offset, most.begin() + r.offset + r.count),
                std::vector<double>(result.stage_grads.begin() + r.offset,
                                    result.stage_grads.begin() + r.offset + r.count))
          << "tp " << tp << ": " << parameter_tensor_name(r.tensor) << " layer " << r.layer;
    }
  }
}

TEST(TensorParallelGpt, LossAndReplicatedGradientsAreBitwiseEqualOnEveryTpRank) {
  expect_loss_and_replicated_gradients_equal_on_every_tp_rank(false);
}

// A block computes the same operations whether the next is in its range or the next range's, at
// any tp: for a fixed tp, pipeline stages are bitwise free.
TEST(TensorParallelGpt, TwoRangesGiveBitwiseTheWholeRangeAtTheSameTp) {
  const std::vector<double> model = random_model();
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult whole = run_gpt<float>(&g.groups, model), split = run_two_ranges<float>(&g.groups, model);
    EXPECT_EQ(split.loss, whole.loss) << "tp " << tp;
    EXPECT_EQ(split.grads, whole.grads) << "tp " << tp;
  }
}

// I then W runs gpt_backward's kernels on the same values, and the column-parallel input
// gradients' all-reduces (I's) sum the same partial sums as the fused backward's (there on the
// overlap's stream): bitwise the fused step at the same tp, for the whole model (embedding, blocks
// and head on one range) and cut into two ranges (an input gradient handed between them), as at
// tp 1 (tests/gpt_test.cu). The fused attention's model too (its own I and W of the attention).
TEST(TensorParallelGpt, SplitBackwardGivesBitwiseTheFusedBackwardAtTheSameTp) {
  const std::vector<double> model = random_model(), fused_model = random_model(kFused);
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult whole = run_gpt<float>(&g.groups, model),
                    whole_split = run_gpt<float>(&g.groups, model, kMaterialized, Backward::split);
    EXPECT_EQ(whole_split.loss, whole.loss) << "tp " << tp;
    EXPECT_EQ(whole_split.stage_grads, whole.stage_grads) << "tp " << tp << ": the whole range";
    const GptResult cut = run_two_ranges<float>(&g.groups, model),
                    cut_split = run_two_ranges<float>(&g.groups, model, Backward::split);
    EXPECT_EQ(cut_split.grads, cut.grads) << "tp " << tp << ": two ranges";
    const GptResult fused = run_gpt<float>(&g.groups, fused_model, kFused),
                    fused_split = run_gpt<float>(&g.groups, fused_model, kFused, Backward::split);
    EXPECT_EQ(fused_split.stage_grads, fused.stage_grads) << "tp " << tp << ": the fused attention";
  }
}

// Sequence parallelism (model/gpt_sequence_parallel.cu) changes one kind of sum: each LayerNorm's
// parameter gradient is each rank's sum over its B T / tp rows, then summed over tp (K = B T / tp
// then tp terms instead of B T = 16 in one kernel), within the same tolerances as tp alone. Every
// other value is the tp run's: a reduce-scatter adds the same partial products as the all-reduce.
// NCCL promises no order for either collective, but a sum of two terms has one value in any order,
// so at tp 2 the loss and every gradient but the LayerNorms' (ln1, ln2, lnf) are bitwise the tp
// run's without it, on any NCCL; at tp 4 they are within the tolerance (the CPU build's NCCL adds
// in rank order and gives them bitwise there too, which the test does not rely on).
bool is_layernorm(int tensor) {
  return tensor == kLn1w || tensor == kLn1b || tensor == kLn2w || tensor == kLn2b || tensor == kLnfw ||
         tensor == kLnfb;
}

TEST(SequenceParallelGpt, DoubleLossAndEveryGradientMatchOneProcess) {
  expect_matches_one_process<double>(1e-12, kMaterialized, true);
}

TEST(SequenceParallelGpt, FloatLossAndEveryGradientMatchOneProcess) {
  expect_matches_one_process<float>(2e-5, kMaterialized, true);
}

TEST(SequenceParallelGpt, FusedAttentionDoubleLossAndEveryGradientMatchOneProcess) {
  expect_matches_one_process<double>(1e-12, kFused, true);
}

TEST(SequenceParallelGpt, BitwiseTheTpRunButForTheLayerNormGradients) {
  const std::vector<double> model = random_model();
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult without = run_gpt<float>(&g.groups, model),
                    with = run_gpt<float>(&g.groups, model, kMaterialized, Backward::fused, true);
    const bool two_terms = tp == 2;  // each collective's sum has one value in any order
    if (two_terms)
      EXPECT_EQ(with.loss, without.loss) << "tp " << tp;
    else
      EXPECT_LE(std::abs(with.loss - without.loss), 2e-5 * std::abs(without.loss)) << "tp " << tp;
    for (int tensor = 0; tensor < kNumParameterTensors; ++tensor) {
      const std::vector<double> sp = tensor_of(with.grads, tensor), plain = tensor_of(without.grads, tensor);
      if (is_layernorm(tensor) || !two_terms)
        EXPECT_LE(max_error_relative_to_scale(sp, plain), 2e-5) << "tp " << tp << ": " << parameter_tensor_name(tensor);
      else
        EXPECT_EQ(sp, plain) << "tp " << tp << ": the gradient of " << parameter_tensor_name(tensor);
    }
  }
}

// The LayerNorms' gradients are summed over tp before they are added: bitwise equal on every tp
// rank, as the replicated tensors must stay (the norm counts them once).
TEST(SequenceParallelGpt, LossAndReplicatedGradientsAreBitwiseEqualOnEveryTpRank) {
  expect_loss_and_replicated_gradients_equal_on_every_tp_rank(true);
}

// The range's output and input gradient are the rank's shard: two ranges handing shards between
// them give bitwise the whole range's step.
TEST(SequenceParallelGpt, TwoRangesGiveBitwiseTheWholeRangeAtTheSameTp) {
  const std::vector<double> model = random_model();
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult whole = run_gpt<float>(&g.groups, model, kMaterialized, Backward::fused, true),
                    split = run_two_ranges<float>(&g.groups, model, Backward::fused, true);
    EXPECT_EQ(split.loss, whole.loss) << "tp " << tp;
    EXPECT_EQ(split.grads, whole.grads) << "tp " << tp;
  }
}

// The split backward with it (model/gpt_split_backward_sequence_parallel.cu): I gathers what W
// reads and sums the LayerNorms' gradients over tp as the fused backward does, W adds them: bitwise
// the fused backward with it, whole, cut into two ranges (shards handed between them) and with
// the fused attention.
TEST(SequenceParallelGpt, SplitBackwardGivesBitwiseTheFusedBackwardAtTheSameTp) {
  const std::vector<double> model = random_model(), fused_model = random_model(kFused);
  for (const int tp : sizes_dividing_the_world({2, 4})) {
    TensorParallelGroups g(tp);
    const GptResult whole = run_gpt<float>(&g.groups, model, kMaterialized, Backward::fused, true),
                    whole_split = run_gpt<float>(&g.groups, model, kMaterialized, Backward::split, true);
    EXPECT_EQ(whole_split.loss, whole.loss) << "tp " << tp;
    EXPECT_EQ(whole_split.stage_grads, whole.stage_grads) << "tp " << tp << ": the whole range";
    const GptResult cut = run_two_ranges<float>(&g.groups, model, Backward::fused, true),
                    cut_split = run_two_ranges<float>(&g.groups, model, Backward::split, true);
    EXPECT_EQ(cut_split.grads, cut.grads) << "tp " << tp << ": two ranges";
    const GptResult fused = run_gpt<float>(&g.groups, fused_model, kFused, Backward::fused, true),
                    fused_split = run_gpt<float>(&g.groups, fused_model, kFused, Backward::split, true);
    EXPECT_EQ(fused_split.stage_grads, fused.stage_grads) << "tp " << tp << ": the fused attention";
  }
}

}  // namespace
