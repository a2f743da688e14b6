// The whole model on world rank 0 for a checkpoint (trainer/checkpoints/gather_model.h).
#include "trainer/checkpoints/gather_model.h"

#include <cuda_bf16.h>

#include "comm/host_exchange.h"

namespace {

// values: this stage's download in llm.c's layout; on world rank 0 it comes back with replica
// 0's other stages' regions filled in.
template <typename Element>
std::vector<float> gather_stages(const Trainer<Element>& trainer, std::vector<float> values) {
  const Mesh& mesh = trainer.groups.mesh;
  if (mesh.pp == 1 || mesh.dp_rank != 0) return values;
  std::vector<std::vector<HostSpan>> spans_of_stage(mesh.pp);
  for (int stage = 0; stage < mesh.pp; ++stage)
    for (const ParameterRegion& r : stage_regions(trainer, stage)) spans_of_stage[stage].push_back({r.full_offset, r.count});
  gather_spans_to_first_stage(mesh, values, spans_of_stage);
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
  m = gather_stages(trainer, std::move(m));
  v = gather_stages(trainer, std::move(v));
}

template <typename Element>
std::vector<float> gather_master_weights(const Trainer<Element>& trainer) {
  std::vector<float> master = download_master_weights(trainer);
  return master.empty() ? master : gather_stages(trainer, std::move(master));
}

#define INSTANTIATE_GATHER_MODEL(Element)                                                                   \
  template std::vector<float> gather_parameters<Element>(const Trainer<Element>&);                          \
  template void gather_moments<Element>(const Trainer<Element>&, std::vector<float>&, std::vector<float>&); \
  template std::vector<float> gather_master_weights<Element>(const Trainer<Element>&);

INSTANTIATE_GATHER_MODEL(float)
INSTANTIATE_GATHER_MODEL(__nv_bfloat16)
