// The one-process reference of PipeDream's asynchronous pipeline (pipeline/pipedream.h; docs/
// pipeline.md, "The asynchronous pipeline"): the stated rule applied with explicit version
// bookkeeping, on the whole model in llm.c's layout, fp32 or bf16, microbatches in order.
//
// Every element of the model belongs to the stage whose layers hold it (wte to stage 0: the tied
// head follows stage 0's version sequence). versions[v] is the model after v updates of every
// stage: stage s's update v sums the gradients of microbatches (v - 1) K .. v K - 1 at stage s,
// whenever the pipeline runs it, so the reference may apply every stage's update v at once, after
// microbatch v K - 1, as long as no microbatch before it needs a later version (none does:
// microbatch k uses versions up to floor(k / K), pipeline/pipedream.h). For microbatch k the
// forward reads a model assembled element by element from versions[v_F(stage of the element, k)];
// the backward from versions[v_B(...)], except wte, which every use of microbatch k (embedding,
// head forward, head backward) takes at stage 0's forward version. With dp replicas each runs
// that rule on its own microbatches; each loss is scaled by 1 / (B T K dp): an update's gradient,
// summed over the replicas, is that of the mean loss of their K dp microbatches. An update is
// the trainer's: the head's share of wte's gradient joins the embedding's, then AdamW at t = v on
// every tensor with GPT-2's weight decay, at a constant learning rate; in bf16, the trainer's mixed
// precision: the versions are bf16 (the initial parameters rounded to nearest), AdamW updates the
// fp32 master weights (when kept; they start as those bf16 values) and writes the bf16 parameters
// by stochastic rounding with rounding_key(seed, v) at each element's index in llm.c's layout,
// every microbatch's gradient accumulated in bf16 as the trainer's. With vertical sync (the only
// rule that clips) the update is decided by its gradient's norm, the layout-independent one of
// trainer/step/optimizer.h (every (tensor, layer) slot's fp32 squared sum, the slots added in
// order): clipped by settings.grad_clip as the synchronous step clips, and not applied at all
// (weights, master weights and moments as they were) when the norm is not finite. Without it each
// stage's update v is applied only when the fp32 sum of squares of its own gradient of v is finite
// (the elements of the stages that skip it stay as they were), wte's as stage 0's.
//
// Lengths (issue 34's microbatches of different lengths): step t's microbatches at its cap
// (caps[t]), packed sequences cut to it, or with documents each at its own T_k up to it, with
// padding. Each loss is then scaled by 1 / the real targets (not -1) of its update's K dp
// microbatches, counted here from the targets read, and a step's loss is, packed, the mean of its
// microbatches' mean losses, with documents their loss sums over the step's real targets. At T
// without documents that scale is the 1 / (B T K dp) above, bitwise (an exact integer).
//
// Drains (a checkpoint saved at the end of a run, and its resume, which warms the pipeline up
// again): after a drain at step d, every stage's microbatch k >= d m takes the versions the rule
// gives microbatch k - d m of a run from step d's model, the d m / K updates before counted on.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <stdexcept>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/cublas_check.cuh"
#include "kernels/element.cuh"
#include "kernels/stochastic_rounding.cuh"
#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/parameters.h"
#include "pipeline/layer_split.h"
#include "pipeline/pipedream.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "trainer/data/data.h"
#include "trainer/data/documents.h"
#include "trainer/step/optimizer.h"

namespace pipedream_reference {

struct Lengths {
  std::optional<DocumentReader> documents;  // read from it instead of the packed reader
  std::vector<size_t> caps;                 // per step: its cap; empty: T
};

struct Run {
  std::vector<double> losses;     // per step: its loss (the top says which mean)
  std::vector<float> parameters;  // after the last update, llm.c's layout
  std::vector<double> norms;      // per update from 1: [v - 1] its gradient's norm (vertical sync only)
  std::vector<bool> applied;      // per update from 1: not skipped for a non-finite norm
};

// The norm tables (global_norm_squared_of_table's) of llm.c's layout, one per layer: each (tensor,
// layer) with its slot (model/norm_slots.h), as every stage's table holds them in its own layout;
// the embeddings and the final LayerNorm with layer 0 (their ParameterRegion's layer). A launch
// per layer gives each tensor's slot the same sum, bitwise, as one launch of the whole model
// would, from its own blocks; that one would be 100 blocks of 512 threads, whose fibers under
// `make racecheck` outnumber those it keeps for reuse (cpu/launch/race_fibers.cpp): making and
// ending the rest took most of PipeDream's vertical-sync test there (docs/testing.md).
// A layer's table is tensors [first, first + count) of the concatenated tables.
struct LayerNormTable {
  size_t first = 0, count = 0;
  unsigned total_blocks = 0;
};
inline std::vector<LayerNormTable> norm_tables_of_layers(const GPTConfig& config, std::vector<NormTensor>& tensors) {
  std::vector<std::vector<size_t>> offsets(config.num_layers), counts(config.num_layers), slots(config.num_layers);
  for (const ParameterRegion& r : parameter_layout(config, {whole_model(config)}).regions) {
    offsets[size_t(r.layer)].push_back(r.full_offset);
    counts[size_t(r.layer)].push_back(r.count);
    slots[size_t(r.layer)].push_back(norm_slot(r.tensor, r.layer, config.num_layers));
  }
  std::vector<LayerNormTable> tables(size_t(config.num_layers));
  tensors.clear();
  for (size_t l = 0; l < tables.size(); ++l) {
    const std::vector<NormTensor> layer = norm_tensor_table(offsets[l], counts[l], slots[l], tables[l].total_blocks);
    tables[l].first = tensors.size();
    tables[l].count = layer.size();
    tensors.insert(tensors.end(), layer.begin(), layer.end());
  }
  return tables;
}

// An update's gate (kernels/adamw.cuh) and norm (=) from the whole model's gradients (llm.c's
// layout), with optimizer's buffers: the trainer's arithmetic. tables are norm_tables_of_layers',
// tensors (device) the concatenated tables they index.
template <typename Element>
AdamWGate decide_update(Optimizer& optimizer, const std::vector<LayerNormTable>& tables, const NormTensor* tensors,
                        const Element* gradients, double grad_clip, double& norm, cudaStream_t stream) {
  const size_t num_slots = norm_slot_count(optimizer.config.num_layers);
  CUDA_CHECK(cudaMemsetAsync(optimizer.norm_partials, 0, num_slots * sizeof(float), stream));
  for (size_t l = 0; l < tables.size(); ++l)
    global_norm_squared_of_table<Element>(optimizer.norm_partials, optimizer.norm_workspace, gradients,
                                          tensors + tables[l].first, int(tables[l].count), tables[l].total_blocks,
                                          stream);
  sum_rows_in_fixed_order(optimizer.squared_norm, optimizer.norm_partials, 1, num_slots, stream);
  CUDA_CHECK(cudaMemsetAsync(optimizer.nonfinite_ranks, 0, sizeof(double), stream));
  set_adamw_gate(optimizer.gate, optimizer.norm, optimizer.squared_norm, optimizer.nonfinite_ranks, grad_clip, stream);
  AdamWGate gate;
  CUDA_CHECK(cudaMemcpy(&gate, optimizer.gate, sizeof(AdamWGate), cudaMemcpyDeviceToHost));
  CUDA_CHECK(cudaMemcpy(&norm, optimizer.norm, sizeof(double), cudaMemcpyDeviceToHost));
  return gate;
}

// The stage of each element of llm.c's layout under the even split of the layers over p stages.
inline std::vector<int> stage_of_elements(const GPTConfig& config, int p) {
  std::vector<int> stage(num_parameters(config), -1);
  const std::vector<LayerRange> ranges = split_layers(config.num_layers, p, 1);
  for (int s = 0; s < p; ++s)
    for (const ParameterRegion& r : parameter_layout(config, {ranges[s]}).regions)
      if (!r.tied_copy) std::fill(stage.begin() + r.full_offset, stage.begin() + r.full_offset + r.count, s);
  return stage;
}

// `steps` steps of m microbatches on each of dp replicas, read from reader as the trainer splits
// them (step t's m dp microbatches in order, replica r's the r-th m), on p stages under rule, from
// the parameters initial (llm.c's layout). Each replica's microbatch k (its own count) takes the
// versions the rule gives k; an update's gradient is each replica's (wte's with the head's share)
// summed over the replicas in rank order, fp32 (the all-reduce's order, comm/collectives.h).
// drains: the steps (1, 2, ...) after which the pipeline drains. bf16 (Element) at dp 1 or 2: two
// replicas' bf16 values summed in fp32 and rounded to bf16 are the one rounding of their exact sum
// (exact in fp32 unless their exponents are 16 apart, and then both round to the larger), the
// all-reduce's; more would be a chain of roundings in the all-reduce's order. nan_gradient (update,
// element of llm.c's layout): a NaN written there into replica 0's gradient of that update before
// the sums, as TRAIN_TEST_NAN writes it on one rank.
template <typename Element = float>
Run run(const GPTConfig& config, int B, int T, int p, int m, int steps, const PipeDreamRule& rule,
        const AdamWSettings& settings, double learning_rate, const std::vector<float>& initial, BatchReader reader,
        int dp = 1, const std::vector<int>& drains = {}, const MixedPrecision& precision = {},
        std::optional<std::pair<int, size_t>> nan_gradient = {}, Lengths lengths = {}) {
  constexpr bool bf16 = std::is_same_v<Element, __nv_bfloat16>;
  if (bf16 && dp > 2) throw std::logic_error("pipedream_reference::run: bf16 at dp 1 or 2 only");
  const auto to_elements = [](const std::vector<float>& values) {
    std::vector<Element> elements(values.size());
    std::transform(values.begin(), values.end(), elements.begin(), [](float x) { return from_compute<Element>(x); });
    return elements;
  };
  const auto to_floats = [](const std::vector<Element>& elements) {
    std::vector<float> values(elements.size());
    std::transform(elements.begin(), elements.end(), values.begin(), [](Element x) { return float(to_compute(x)); });
    return values;
  };
  const size_t n = initial.size(), wte_count = size_t(config.padded_vocab_size) * config.channels;
  const std::vector<int> stage = stage_of_elements(config, p);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(config);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  const int K = rule.update_every;
  std::vector<std::vector<float>> versions = {to_floats(to_elements(initial))};  // each Element's values
  // Microbatch k's model, each element at the version its stage uses (forward or backward),
  // counted from the last drain at or before k.
  const auto assemble = [&](int k, bool forward) {
    int drained = 0;  // the first microbatch after the last drain
    for (int d : drains)
      if (d * m <= k) drained = std::max(drained, d * m);
    std::vector<float> model(n);
    for (size_t i = 0; i < n; ++i) {
      const bool wte = i < sizes[0];  // wte is llm.c's first tensor
      const int v = forward || wte ? pipedream_forward_version(rule, p, stage[i], k - drained)
                                   : pipedream_backward_version(rule, p, stage[i], k - drained);
      model[i] = versions.at(drained / K + v)[i];
    }
    return model;
  };
  // Replica r's gradients at r n, its head's share of wte's at r Vp C.
  DeviceBuffer<Element> grads(to_elements(std::vector<float>(dp * n, 0.0f)));
  DeviceBuffer<Element> grad_wte_head(to_elements(std::vector<float>(dp * wte_count, 0.0f)));
  DeviceBuffer<Element> params(n);
  DeviceBuffer<float> moment1(std::vector<float>(n, 0.0f)), moment2(std::vector<float>(n, 0.0f));
  DeviceBuffer<float> master(versions[0]);
  float* master_weights = bf16 && precision.master_weights ? master.data() : nullptr;
  DeviceBuffer<double> loss_sums(dp);
  DeviceBuffer<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  std::vector<int> host_tokens(size_t(B) * T), host_targets(size_t(B) * T);
  // Replica r's microbatch j of the step at [r m + j]: its (B, T_k) at the start, T_k, real targets.
  std::vector<std::vector<int>> step_tokens(size_t(m) * dp), step_targets(size_t(m) * dp);
  std::vector<int> step_lengths(size_t(m) * dp);
  std::vector<double> step_real(size_t(m) * dp);
  const LayerRange whole = whole_model(config);
  Activations<Element> acts = create_activations<Element>(config, B, T, whole);
  BackwardScratch<Element> scratch = create_backward_scratch<Element>(config, B, T, whole);
  CublasHandle cublas;
  const cudaStream_t stream = nullptr;
  Optimizer norm = create_optimizer(config, parameter_layout(config, {whole}), false, 0,
                                    whole_stage(parameter_layout(config, {whole})));
  std::vector<NormTensor> host_norm_tensors;
  const std::vector<LayerNormTable> norm_tables = norm_tables_of_layers(config, host_norm_tensors);
  DeviceBuffer<NormTensor> norm_tensors(host_norm_tensors);
  const uint64_t start = reader.next_microbatch;
  Run result;
  for (int t = 0; t < steps; ++t) {
    CUDA_CHECK(cudaMemset(loss_sums.data(), 0, dp * sizeof(double)));
    const size_t cap = lengths.caps.empty() ? size_t(T) : lengths.caps.at(size_t(t));
    double real = 0;  // the step's
    for (int i = 0; i < m * dp; ++i) {
      const uint64_t index = start + uint64_t(t) * m * dp + uint64_t(i);
      std::vector<int>& tokens_i = step_tokens[size_t(i)] = std::vector<int>(size_t(B) * T, 0);
      std::vector<int>& targets_i = step_targets[size_t(i)] = std::vector<int>(size_t(B) * T, -1);
      if (lengths.documents) {
        lengths.documents->next_microbatch = index;
        step_lengths[size_t(i)] = int(read_document_microbatch(*lengths.documents, cap, tokens_i.data(), targets_i.data()));
      } else {
        reader.next_microbatch = index;
        read_microbatch(reader, host_tokens.data(), host_targets.data());
        for (size_t b = 0; b < size_t(B); ++b)
          for (size_t x = 0; x < cap; ++x) {
            tokens_i[b * cap + x] = host_tokens[b * T + x];
            targets_i[b * cap + x] = host_targets[b * T + x];
          }
        step_lengths[size_t(i)] = int(cap);
      }
      const size_t rows = size_t(B) * step_lengths[size_t(i)];
      step_real[size_t(i)] = double(std::count_if(targets_i.begin(), targets_i.begin() + rows, [](int x) { return x >= 0; }));
      real += step_real[size_t(i)];
    }
    for (int j = 0; j < m; ++j) {
      const int k = t * m + j;
      double update_real = 0;  // the real targets of the update of microbatch j: K of every replica
      for (int r = 0; r < dp; ++r)
        for (int i = j / K * K; i < j / K * K + K; ++i) update_real += step_real[size_t(r * m + i)];
      for (int r = 0; r < dp; ++r) {
        const int Tk = step_lengths[size_t(r * m + j)];
        tokens.upload(step_tokens[size_t(r * m + j)]);
        targets.upload(step_targets[size_t(r * m + j)]);
        params.upload(to_elements(assemble(k, true)));
        gpt_forward(config, whole, point_views(params.data(), config), acts, tokens.data(), nullptr, targets.data(),
                    1.0 / update_real, B, Tk, cublas.get(), stream);
        add_mean_loss(acts, B, Tk, lengths.documents ? 1.0 : double(B) * Tk, loss_sums.data() + r, stream);
        if (!rule.weight_stashing) params.upload(to_elements(assemble(k, false)));
        gpt_backward(config, whole, point_views(params.data(), config), point_views(grads.data() + r * n, config),
                     grad_wte_head.data() + r * wte_count, acts, scratch, tokens.data(), nullptr, nullptr, nullptr, B,
                     Tk, cublas.get(), stream);
      }
      if ((k + 1) % K != 0) continue;
      // Update v = (k + 1) / K of every stage, on the replicas' sum.
      const int v = (k + 1) / K;
      if (nan_gradient && nan_gradient->first == v) {
        const Element nan = from_compute<Element>(std::nanf(""));
        CUDA_CHECK(cudaMemcpy(grads.data() + nan_gradient->second, &nan, sizeof(Element), cudaMemcpyHostToDevice));
      }
      for (int r = 0; r < dp; ++r)
        sum_tied_embedding_gradient(config, grads.data() + r * n, grad_wte_head.data() + r * wte_count, stream);
      std::vector<float> every = to_floats(grads.to_host()), sum(every.begin(), every.begin() + n);
      for (int r = 1; r < dp; ++r)
        for (size_t i = 0; i < n; ++i) sum[i] += every[r * n + i];
      std::vector<Element> summed = to_elements(sum);  // replica 0's place: the rest is zeroed below
      summed.resize(dp * n, from_compute<Element>(0.0f));
      grads.upload(summed);
      params.upload(to_elements(versions.back()));
      double update_norm = 0;
      const AdamWGate gate = rule.vertical_sync
                                 ? decide_update(norm, norm_tables, norm_tensors.data(), grads.data(), settings.grad_clip,
                                                 update_norm, stream)
                                 : AdamWGate{1.0, 1};
      // Without vertical sync each stage gates its own update by its own gradient: applied when
      // the fp32 sum of its elements' squares is finite (the synchronous guard's rule on one stage).
      // Summed here in index order, the device in its own: the two differ only within a rounding
      // of FLT_MAX, where no test goes (a NaN or an infinity makes either sum non-finite).
      std::vector<float> stage_sums(size_t(p), 0.0f);
      float wte_sum = 0.0f;
      for (size_t i = 0; i < n && !rule.vertical_sync; ++i) {
        const float g = float(to_compute(summed[i]));
        stage_sums[size_t(stage[i])] += g * g;
        if (i < sizes[0]) wte_sum += g * g;
      }
      std::vector<bool> stage_applies(size_t(p), true);
      for (int s = 0; s < p; ++s) stage_applies[size_t(s)] = std::isfinite(stage_sums[size_t(s)]);
      const bool wte_finite = std::isfinite(wte_sum);
      // The head's copy of wte takes stage 0's update by wte's gradient alone: the one wte here
      // cannot follow it when stage 0 skips for another tensor.
      if (p > 1 && !stage_applies[0] && wte_finite)
        throw std::logic_error("pipedream_reference::run: stage 0 skips an update whose wte gradient is finite");
      const bool every_stage = std::all_of(stage_applies.begin(), stage_applies.end(), [](bool b) { return b; });
      std::vector<float> before, moment1_before, moment2_before, master_before;
      if (!every_stage) {
        before = versions.back();
        moment1_before = moment1.to_host();
        moment2_before = moment2.to_host();
        master_before = master.to_host();
      }
      result.norms.push_back(update_norm);
      result.applied.push_back(gate.apply != 0 && every_stage);
      const uint64_t key = rounding_key(precision.rounding_seed, uint64_t(v));
      for (int i = 0; i < kNumParameterTensors && gate.apply; ++i)
        adamw_update<Element>(params.data() + offsets[i], master_weights ? master_weights + offsets[i] : nullptr,
                              grads.data() + offsets[i], moment1.data() + offsets[i], moment2.data() + offsets[i],
                              sizes[i], learning_rate, settings.beta1, settings.beta2, settings.eps,
                              parameter_tensor_has_weight_decay(i) ? settings.weight_decay : 0.0, gate.grad_scale, v,
                              {key, offsets[i]}, stream);
      versions.push_back(to_floats(params.to_host()));
      if (!every_stage) {  // the skipping stages' elements as they were: weights, moments, master weights
        std::vector<float> moment1_after = moment1.to_host(), moment2_after = moment2.to_host(),
                           master_after = master.to_host();
        for (size_t i = 0; i < n; ++i)
          if (!stage_applies[size_t(stage[i])]) {
            versions.back()[i] = before[i];
            moment1_after[i] = moment1_before[i];
            moment2_after[i] = moment2_before[i];
            master_after[i] = master_before[i];
          }
        moment1.upload(moment1_after);
        moment2.upload(moment2_after);
        master.upload(master_after);
      }
      CUDA_CHECK(cudaMemset(grads.data(), 0, dp * n * sizeof(Element)));
      CUDA_CHECK(cudaMemset(grad_wte_head.data(), 0, dp * wte_count * sizeof(Element)));
    }
    // The replicas' loss sums in rank order, as the trainer's sum over the world.
    const std::vector<double> sums = loss_sums.to_host();
    double step_loss = 0;
    for (double replica_sum : sums) step_loss += replica_sum;
    result.losses.push_back(step_loss / (lengths.documents ? real : double(m) * dp));
  }
  destroy_activations(acts);
  destroy_backward_scratch(scratch);
  destroy_optimizer(norm);
  result.parameters = versions.back();
  return result;
}

}  // namespace pipedream_reference
