// The whole model on world rank 0 for a checkpoint (trainer/checkpoints/gather_model.h).
#include "trainer/checkpoints/gather_model.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "comm/host_exchange.h"
#include "model/optimizer_shards.h"

namespace {

// Appends the runs of llm.c's layout that region r covers: one, or a tp rank's slice row by row.
void append_spans_of_region(const ParameterRegion& r, std::vector<HostSpan>& spans) {
  if (!r.cut) {
    spans.push_back({r.full_offset, r.count});
    return;
  }
  for (int row = 0; row < r.cut->local_out(); ++row)
    spans.push_back({r.full_offset + slice_row_start(*r.cut, row), size_t(r.cut->local_in())});
}

// The runs of llm.c's layout that tp rank `shard.rank` alone holds of the stage's chunks: its
// slices and its rows of wte (the tied copy's too: the stage with the head sends its whole wte to
// the first stage next). The replicated tensors are tp rank 0's already.
std::vector<HostSpan> spans_of_tp_rank(const GPTConfig& config, const std::vector<LayerRange>& chunks,
                                       TensorParallelRank shard) {
  std::vector<HostSpan> spans;
  for (const ParameterRegion& r : parameter_layout(config, chunks, shard).regions)
    if (!replicated_on_tp_ranks(r.tensor)) append_spans_of_region(r, spans);
  return spans;
}

// values: this tp rank's download in llm.c's layout (its slices, the replicated tensors whole);
// on the stage's tp rank 0 of replica 0 it comes back with the other tp ranks' slices filled in:
// the stage's whole tensors, as at tp = 1.
template <typename Element>
std::vector<float> gather_tp_ranks(const Trainer<Element>& trainer, std::vector<float> values) {
  const Mesh& mesh = trainer.groups.mesh;
  std::vector<std::vector<HostSpan>> spans(mesh.tp);
  for (int r = 1; r < mesh.tp; ++r) spans[r] = spans_of_tp_rank(trainer.config, trainer.chunks, {mesh.tp, r});
  gather_spans_to_first_tp_rank(mesh, values, spans);
  return values;
}

// values: this stage's download in llm.c's layout (gathered over its tp ranks); on world rank 0 it
// comes back with replica 0's other stages' regions filled in.
template <typename Element>
std::vector<float> gather_stages(const Trainer<Element>& trainer, std::vector<float> values) {
  values = gather_tp_ranks(trainer, std::move(values));
  const Mesh& mesh = trainer.groups.mesh;
  if (mesh.pp == 1 || mesh.dp_rank != 0 || mesh.tp_rank != 0) return values;
  std::vector<std::vector<HostSpan>> spans_of_stage(mesh.pp);
  for (int stage = 0; stage < mesh.pp; ++stage)
    for (const ParameterRegion& r : stage_regions(trainer, stage)) spans_of_stage[stage].push_back({r.full_offset, r.count});
  gather_spans_to_first_stage(mesh, values, spans_of_stage);
  return values;
}

// values: this rank's download of its optimizer state in llm.c's layout; with ZeRO-1 (each
// replica its shard's regions, zeros elsewhere) the stage's replica 0 gets the other replicas'
// shards filled in, region by region (a tp rank's slice row by row), so that the state is the
// stage's whole again.
template <typename Element>
std::vector<float> gather_replicas(const Trainer<Element>& trainer, std::vector<float> values) {
  if (!trainer.optimizer.shard.of_replicas) return values;
  const Mesh& mesh = trainer.groups.mesh;
  const std::vector<size_t> bounds = optimizer_shards(trainer.parameter_layout, mesh.dp).bounds;
  std::vector<std::vector<HostSpan>> spans_of_replica(mesh.dp);
  for (const ParameterRegion& r : trainer.parameter_layout.regions) {
    const int owner = int(std::upper_bound(bounds.begin(), bounds.end(), r.offset) - bounds.begin()) - 1;
    append_spans_of_region(r, spans_of_replica[owner]);
  }
  gather_spans_to_first_replica(mesh, values, spans_of_replica);
  return values;
}

}  // namespace

template <typename Element>
std::vector<float> gather_parameters(const Trainer<Element>& trainer) {
  return gather_stages(trainer, download_parameters(trainer));
}

template <typename Element>
void gather_moments(const Trainer<Element>& trainer, std::vector<float>& m, std::vector<float>& v) {
  download_moments(trainer, m, v);
  m = gather_stages(trainer, gather_replicas(trainer, std::move(m)));
  v = gather_stages(trainer, gather_replicas(trainer, std::move(v)));
}

template <typename Element>
std::vector<float> gather_master_weights(const Trainer<Element>& trainer) {
  std::vector<float> master = download_master_weights(trainer);
  return master.empty() ? master : gather_stages(trainer, gather_replicas(trainer, std::move(master)));
}

template <typename Element>
std::vector<float> gather_gradients(const Trainer<Element>& trainer) {
  return gather_stages(trainer, download_gradients(trainer));
}

#define INSTANTIATE_GATHER_MODEL(Element)                                                                   \
  template std::vector<float> gather_parameters<Element>(const Trainer<Element>&);                          \
  template std::vector<float> gather_gradients<Element>(const Trainer<Element>&);                           \
  template void gather_moments<Element>(const Trainer<Element>&, std::vector<float>&, std::vector<float>&); \
  template std::vector<float> gather_master_weights<Element>(const Trainer<Element>&);

INSTANTIATE_GATHER_MODEL(float)
INSTANTIATE_GATHER_MODEL(__nv_bfloat16)
