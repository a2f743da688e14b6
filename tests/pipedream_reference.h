// The one-process reference of PipeDream's asynchronous pipeline (pipeline/pipedream.h; docs/
// pipeline.md, "The asynchronous pipeline"): the stated rule applied with explicit version
// bookkeeping, on the whole model in llm.c's layout, fp32, microbatches in order.
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
// the trainer's: the head's share of wte's gradient joins the embedding's, then AdamW (no clipping)
// at t = v on every tensor with GPT-2's weight decay, at a constant learning rate.
//
// Drains (a checkpoint saved at the end of a run, and its resume, which warms the pipeline up
// again): after a drain at step d, every stage's microbatch k >= d m takes the versions the rule
// gives microbatch k - d m of a run from step d's model, the d m / K updates before counted on.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/cublas_check.cuh"
#include "model/config.h"
#include "model/gpt.cuh"
#include "model/parameter_layout.h"
#include "model/parameters.h"
#include "pipeline/layer_split.h"
#include "pipeline/pipedream.h"
#include "tests/cublas_handle.h"
#include "tests/device_buffer.h"
#include "trainer/data/data.h"
#include "trainer/step/optimizer.h"

namespace pipedream_reference {

struct Run {
  std::vector<double> losses;     // per step: the mean of its m microbatches' mean losses
  std::vector<float> parameters;  // after the last update, llm.c's layout
};

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
// drains: the steps (1, 2, ...) after which the pipeline drains.
inline Run run(const GPTConfig& config, int B, int T, int p, int m, int steps, const PipeDreamRule& rule,
               const AdamWSettings& settings, double learning_rate, const std::vector<float>& initial,
               BatchReader reader, int dp = 1, const std::vector<int>& drains = {}) {
  const size_t n = initial.size(), wte_count = size_t(config.padded_vocab_size) * config.channels;
  const std::vector<int> stage = stage_of_elements(config, p);
  const std::array<size_t, kNumParameterTensors> offsets = parameter_tensor_offsets(config);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  const int K = rule.update_every;
  std::vector<std::vector<float>> versions = {initial};
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
  DeviceBuffer<float> grads(std::vector<float>(dp * n, 0.0f)), grad_wte_head(std::vector<float>(dp * wte_count, 0.0f));
  DeviceBuffer<float> params(n), moment1(std::vector<float>(n, 0.0f)), moment2(std::vector<float>(n, 0.0f));
  DeviceBuffer<double> loss_sums(dp);
  DeviceBuffer<int> tokens(size_t(B) * T), targets(size_t(B) * T);
  std::vector<int> host_tokens(size_t(B) * T), host_targets(size_t(B) * T);
  const LayerRange whole = whole_model(config);
  Activations<float> acts = create_activations<float>(config, B, T, whole);
  BackwardScratch<float> scratch = create_backward_scratch<float>(config, B, T, whole);
  CublasHandle cublas;
  const cudaStream_t stream = nullptr;
  const uint64_t start = reader.next_microbatch;
  Run result;
  for (int t = 0; t < steps; ++t) {
    CUDA_CHECK(cudaMemset(loss_sums.data(), 0, dp * sizeof(double)));
    for (int j = 0; j < m; ++j) {
      const int k = t * m + j;
      for (int r = 0; r < dp; ++r) {
        reader.next_microbatch = start + uint64_t(t) * m * dp + uint64_t(r) * m + j;
        read_microbatch(reader, host_tokens.data(), host_targets.data());
        tokens.upload(host_tokens);
        targets.upload(host_targets);
        params.upload(assemble(k, true));
        gpt_forward(config, whole, point_views(params.data(), config), acts, tokens.data(), nullptr, targets.data(),
                    1.0 / (double(B) * T * K * dp), B, T, cublas.get(), stream);
        add_mean_loss(acts, B, T, double(B) * T, loss_sums.data() + r, stream);
        if (!rule.weight_stashing) params.upload(assemble(k, false));
        gpt_backward(config, whole, point_views(params.data(), config), point_views(grads.data() + r * n, config),
                     grad_wte_head.data() + r * wte_count, acts, scratch, tokens.data(), nullptr, nullptr, nullptr, B,
                     T, cublas.get(), stream);
      }
      if ((k + 1) % K != 0) continue;
      // Update v = (k + 1) / K of every stage, on the replicas' sum.
      const int v = (k + 1) / K;
      for (int r = 0; r < dp; ++r)
        sum_tied_embedding_gradient(config, grads.data() + r * n, grad_wte_head.data() + r * wte_count, stream);
      std::vector<float> every = grads.to_host(), sum(every.begin(), every.begin() + n);
      for (int r = 1; r < dp; ++r)
        for (size_t i = 0; i < n; ++i) sum[i] += every[r * n + i];
      grads.upload(sum);  // replica 0's place: the rest is zeroed below
      params.upload(versions.back());
      for (int i = 0; i < kNumParameterTensors; ++i)
        adamw_update<float>(params.data() + offsets[i], nullptr, grads.data() + offsets[i], moment1.data() + offsets[i],
                            moment2.data() + offsets[i], sizes[i], learning_rate, settings.beta1, settings.beta2,
                            settings.eps, parameter_tensor_has_weight_decay(i) ? settings.weight_decay : 0.0, 1.0, v,
                            {0, 0}, stream);
      versions.push_back(params.to_host());
      CUDA_CHECK(cudaMemset(grads.data(), 0, dp * n * sizeof(float)));
      CUDA_CHECK(cudaMemset(grad_wte_head.data(), 0, dp * wte_count * sizeof(float)));
    }
    // The replicas' loss sums in rank order, as the trainer's sum over the world.
    const std::vector<double> sums = loss_sums.to_host();
    double step_loss = 0;
    for (double replica_sum : sums) step_loss += replica_sum;
    result.losses.push_back(step_loss / (double(m) * dp));
  }
  destroy_activations(acts);
  destroy_backward_scratch(scratch);
  result.parameters = versions.back();
  return result;
}

}  // namespace pipedream_reference
