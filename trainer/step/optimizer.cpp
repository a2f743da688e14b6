// AdamW over a stage's regions, the layout-independent global norm and clipping (trainer/step/optimizer.h).
#include "trainer/step/optimizer.h"

#include <cmath>

#include "comm/collectives.h"
#include "comm/tensor_parallel.h"
#include "kernels/adamw.cuh"
#include "kernels/cuda_check.cuh"
#include "kernels/device_memory.cuh"
#include "kernels/global_norm.cuh"
#include "kernels/stochastic_rounding.cuh"
#include "model/norm_slots.h"
#include "model/parameters.h"

namespace {

// The region's slot in the norm-partials table (comm/collectives.h).
size_t slot_of(const ParameterRegion& r, int num_layers) { return norm_slot(r.tensor, r.layer, num_layers); }

}  // namespace

OptimizerShard whole_stage(const ParameterLayout& layout) { return {0, layout.size, layout.size, false}; }

Optimizer create_optimizer(const GPTConfig& config, const ParameterLayout& layout, bool with_master_weights,
                           uint64_t rounding_seed, const OptimizerShard& shard) {
  const size_t n = shard.capacity;
  Optimizer optimizer{};
  optimizer.config = config;
  optimizer.shard = shard;
  for (const ParameterRegion& r : layout.regions)
    if (r.offset >= shard.begin && r.offset + r.count <= shard.end) optimizer.regions.push_back(r);
  optimizer.rounding_seed = rounding_seed;
  optimizer.m = device_alloc<float>(n);
  optimizer.v = device_alloc<float>(n);
  if (with_master_weights) optimizer.master = device_alloc<float>(n);
  // The tables are allocated for the whole stage's regions, alike on every replica (the memory plan's).
  optimizer.norm_workspace = device_alloc<float>(global_norm_workspace_size(int(layout.regions.size())));
  optimizer.norm_partials = device_alloc<float>(norm_slot_count(config.num_layers));
  optimizer.squared_norm = device_alloc<float>(1);
  // The tied copy of wte has no slot: the first stage's counts it. With tp > 1 each tp rank counts
  // its slices, and the replicated tensors, the same on every tp rank, are tp rank 0's alone:
  // queue_gradient_norm sums the slots over tp. The other tp ranks' copies are in the table, not
  // counted (their slot 0, or NaN), so that a non-finite value in one of them skips the step too.
  size_t stage_norm_tensors = 0;
  for (const ParameterRegion& r : layout.regions) stage_norm_tensors += r.tied_copy ? 0 : 1;
  std::vector<size_t> offsets, counts, slots;
  std::vector<int> counted;
  for (const ParameterRegion& r : optimizer.regions) {
    if (r.tied_copy) continue;
    offsets.push_back(r.offset);
    counts.push_back(r.count);
    slots.push_back(slot_of(r, config.num_layers));
    counted.push_back(layout.shard.rank != 0 && replicated_on_tp_ranks(r.tensor) ? 0 : 1);
  }
  const std::vector<NormTensor> norm_table =
      norm_tensor_table(offsets, counts, slots, optimizer.norm_blocks, counted);
  optimizer.norm_tensors = int(norm_table.size());
  optimizer.norm_table = device_alloc<NormTensor>(stage_norm_tensors);
  CUDA_CHECK(cudaMemcpy(optimizer.norm_table, norm_table.data(), norm_table.size() * sizeof(NormTensor),
                        cudaMemcpyHostToDevice));
  optimizer.nonfinite_ranks = device_alloc<double>(1);
  optimizer.norm = device_alloc<double>(1);
  optimizer.gate = device_alloc<AdamWGate>(1);
  optimizer.adamw_tables = upload_adamw_tables({{optimizer.regions, shard.begin, layout.regions.size(), n}});
  CUDA_CHECK(cudaMemset(optimizer.m, 0, n * sizeof(float)));
  CUDA_CHECK(cudaMemset(optimizer.v, 0, n * sizeof(float)));
  return optimizer;
}

void destroy_optimizer(Optimizer& optimizer) {
  device_free(optimizer.m);
  device_free(optimizer.v);
  device_free(optimizer.master);
  device_free(optimizer.norm_workspace);
  device_free(optimizer.norm_partials);
  device_free(optimizer.squared_norm);
  device_free(optimizer.norm_table);
  device_free(optimizer.nonfinite_ranks);
  device_free(optimizer.norm);
  device_free(optimizer.gate);
  free_adamw_tables(optimizer.adamw_tables);
  optimizer = Optimizer{};
}

template <typename Element>
void queue_gradient_norm(Optimizer& optimizer, const CommGroups& groups, const Element* gradients,
                         cudaStream_t stream) {
  const size_t num_slots = norm_slot_count(optimizer.config.num_layers);
  CUDA_CHECK(cudaMemsetAsync(optimizer.norm_partials, 0, num_slots * sizeof(float), stream));
  // Every region's squared sum straight into its slot, in two launches.
  global_norm_squared_of_table<Element>(optimizer.norm_partials, optimizer.norm_workspace, gradients,
                                        optimizer.norm_table, optimizer.norm_tensors, optimizer.norm_blocks, stream);
  if (optimizer.shard.of_replicas) sum_norm_partials_over_replicas(groups, optimizer.norm_partials, num_slots, stream);
  allreduce_tensor_parallel(groups, optimizer.norm_partials, num_slots, ncclFloat, ncclSum, stream);
  gather_layer_norm_partials<float>(groups, optimizer.norm_partials, num_slots, {0, num_slots},
                                    optimizer.squared_norm, stream);
}

void queue_step_gate(Optimizer& optimizer, const CommGroups& groups, const double* loss_sum, double grad_clip,
                     cudaStream_t stream) {
  flag_nonfinite(optimizer.nonfinite_ranks, loss_sum, stream);
  allreduce_world_sum(groups, optimizer.nonfinite_ranks, 1, stream);
  set_adamw_gate(optimizer.gate, optimizer.norm, optimizer.squared_norm, optimizer.nonfinite_ranks, grad_clip, stream);
}

std::vector<float> download_norm_partials(const Optimizer& optimizer, cudaStream_t stream) {
  std::vector<float> partials(norm_slot_count(optimizer.config.num_layers));
  CUDA_CHECK(cudaMemcpyAsync(partials.data(), optimizer.norm_partials, partials.size() * sizeof(float),
                             cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
  return partials;
}

template <typename Element>
void queue_adamw_update(Optimizer& optimizer, Element* parameters, const Element* gradients,
                        const AdamWSettings& settings, double learning_rate, int t, cudaStream_t stream) {
  size_t n = 0;
  for (const ParameterRegion& r : optimizer.regions) n += r.count;
  const size_t first = optimizer.shard.begin;
  adamw_update_regions<Element>(parameters + first, optimizer.master, gradients + first, optimizer.m, optimizer.v, n,
                                optimizer.adamw_tables.regions, optimizer.adamw_tables.block_regions, learning_rate,
                                settings.beta1, settings.beta2, settings.eps, settings.weight_decay, optimizer.gate, t,
                                rounding_key(optimizer.rounding_seed, uint64_t(t)), stream);
}

template void queue_gradient_norm<float>(Optimizer&, const CommGroups&, const float*, cudaStream_t);
template void queue_gradient_norm<__nv_bfloat16>(Optimizer&, const CommGroups&, const __nv_bfloat16*, cudaStream_t);
template void queue_adamw_update<float>(Optimizer&, float*, const float*, const AdamWSettings&, double, int,
                                        cudaStream_t);
template void queue_adamw_update<__nv_bfloat16>(Optimizer&, __nv_bfloat16*, const __nv_bfloat16*,
                                                const AdamWSettings&, double, int, cudaStream_t);
