// bf16's stochastic-rounding key at tp > 1 (issue 33): the rounding bits of a parameter hash its
// index in the whole model (kernels/stochastic_rounding.cuh), and a tp rank's slice of a layer's
// matrix is not one run of those indices. adamw_region_table (trainer/step/adamw_tables.h) gives each
// sliced element its full-model index, so that a bf16 run at any tp rounds every element as the
// tp 1 run does from the same fp32 master value. Checked: each element's key against the index
// to_stage_layout puts there (numbering the whole model), at tp 2 and 4 on every rank; and one
// bf16 AdamW launch on each tp 2 rank's slices, placed back, bitwise the whole model's launch.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/element.cuh"
#include "kernels/stochastic_rounding.cuh"
#include "model/config.h"
#include "model/parameter_layout.h"
#include "tests/device_buffer.h"
#include "trainer/step/adamw_tables.h"

namespace {

// L=2, NH=4, C=8, V=11 (Vp=128): tp 2 and 4 divide the heads, 4 C and Vp.
const GPTConfig kConfig = make_gpt_config(2, 4, 8, 5, 11);

TEST(TensorParallelRounding, SlicedElementKeysByItsFullModelIndex) {
  std::vector<double> numbered(num_parameters(kConfig));
  for (size_t i = 0; i < numbered.size(); ++i) numbered[i] = double(i);
  for (const int tp : {2, 4})
    for (int rank = 0; rank < tp; ++rank) {
      const ParameterLayout layout = parameter_layout(kConfig, {whole_model(kConfig)}, {tp, rank});
      const std::vector<double> index_of = to_stage_layout(layout, numbered);
      for (const AdamWRegion& region : adamw_region_table(layout.regions, 0))
        for (size_t j = 0; j < region.count; ++j)
          ASSERT_EQ(full_model_index(region, j), size_t(index_of[region.offset + j]))
              << "tp " << tp << " rank " << rank << ": element " << j << " of the region at " << region.offset;
    }
}

// One bf16 AdamW step (master weights, decay, a key) over a layout's stage, from the whole model's
// fp32 master values and gradients; the bf16 parameters returned in llm.c's layout as floats (exact).
std::vector<float> bf16_step(const ParameterLayout& layout, const std::vector<float>& master,
                             const std::vector<float>& gradients, std::vector<float> full) {
  const std::vector<float> stage_master = to_stage_layout(layout, master);
  std::vector<__nv_bfloat16> stage_gradients;
  for (float g : to_stage_layout(layout, gradients)) stage_gradients.push_back(__float2bfloat16(g));
  const size_t n = layout.size;
  const std::vector<AdamWRegion> table = adamw_region_table(layout.regions, 0);
  DeviceBuffer<__nv_bfloat16> params(n), grads(stage_gradients);
  DeviceBuffer<float> master_weights(stage_master), m(std::vector<float>(n, 0.0f)), v(std::vector<float>(n, 0.0f));
  DeviceBuffer<AdamWRegion> regions(table);
  DeviceBuffer<int> blocks(adamw_block_regions(table, n));
  DeviceBuffer<AdamWGate> gate(std::vector<AdamWGate>{{1.0, 1}});
  adamw_update_regions<__nv_bfloat16>(params.data(), master_weights.data(), grads.data(), m.data(), v.data(), n,
                                      regions.data(), blocks.data(), 1e-3, 0.9, 0.95, 1e-8, 0.1, gate.data(), 1,
                                      rounding_key(5, 1), nullptr);
  std::vector<float> stage;
  for (__nv_bfloat16 p : params.to_host()) stage.push_back(__bfloat162float(p));
  place_in_full_layout(layout, stage, full);
  return full;
}

TEST(TensorParallelRounding, Bf16UpdateOfEachTpRanksSlicesIsTheWholeModelsBitwise) {
  const size_t n = num_parameters(kConfig);
  std::vector<float> master(n), gradients(n);
  uint64_t state = 11;
  const auto uniform = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return float(double(state >> 11) / double(1ull << 53)) - 0.5f;
  };
  for (size_t i = 0; i < n; ++i) master[i] = 0.1f * uniform(), gradients[i] = uniform();
  const std::vector<float> whole =
      bf16_step(parameter_layout(kConfig, {whole_model(kConfig)}), master, gradients, std::vector<float>(n));
  std::vector<float> placed(n);
  for (int rank = 0; rank < 2; ++rank)
    placed = bf16_step(parameter_layout(kConfig, {whole_model(kConfig)}, {2, rank}), master, gradients, placed);
  for (size_t i = 0; i < n; ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(placed[i]), std::bit_cast<uint32_t>(whole[i])) << "element " << i;
}

}  // namespace
