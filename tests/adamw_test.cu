// Specification of the AdamW step (kernels/adamw.cuh): ten steps against a plain C++
// statement of the update rule in double, with and without weight decay, with a gradient
// scale, for double, float, and bf16 parameters with and without an fp32 master copy; one
// step with values chosen so that where eps goes shows plainly; and the bf16 parameters'
// stochastic rounding: its bits are those of the element's index, however the tensor is cut
// into calls, and it is unbiased; a stage's regions in one launch, and the table that names each
// block's first region. The comparisons measure errors against the tensor's scale:
// moments pass near zero when the gradients change sign, so an element's own magnitude is no
// measure.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/adamw.cuh"
#include "kernels/stochastic_rounding.cuh"
#include "tests/device_buffer.h"
#include "tests/gradient_check.h"
#include "tests/scaled_error.h"

namespace {

constexpr size_t kCount = 1037;  // not a multiple of the block size
constexpr int kSteps = 10;

// eps = 1e-3, not the trainer's 1e-8, so that where eps goes shows: the scaled gradients
// (uniform in [-0.5, 0.5]) give sqrt(v_hat) of a few 1e-2 to 0.3, and sqrt(v_hat + eps)
// instead of sqrt(v_hat) + eps changes an update by a few % to tens of %; with 1e-8 only
// the rare elements whose v_hat is tiny would notice. Weight decay 0.1 moves p by lr 0.1 p =
// 1e-3 p per step. After ten steps either mistake moves p by about 1e-2 of its scale (measured
// 9e-3 and 1e-2), far beyond the double and fp32 tolerances below.
struct Hyperparameters {
  double learning_rate = 1e-2, beta1 = 0.9, beta2 = 0.95, eps = 1e-3, weight_decay = 0.0, grad_scale = 0.5;
};

// The update rule, element by element, in double.
void reference_step(std::vector<double>& p, std::vector<double>& m, std::vector<double>& v,
                    const std::vector<double>& grads, const Hyperparameters& h, int t) {
  for (size_t i = 0; i < p.size(); ++i) {
    const double g = h.grad_scale * grads[i];
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g;
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * g * g;
    const double m_hat = m[i] / (1 - std::pow(h.beta1, t));
    const double v_hat = v[i] / (1 - std::pow(h.beta2, t));
    p[i] -= h.learning_rate * (m_hat / (std::sqrt(v_hat) + h.eps) + h.weight_decay * p[i]);
  }
}

// The rounding of step t in these tests (the trainer's seed is the run's --seed).
StochasticRounding rounding_of_step(int t) { return {rounding_key(99, t), 0}; }

// The gradients of step t, representable in T.
template <typename T>
std::vector<double> step_grads(int t) {
  return to_double(convert<T>(random_values(kCount, 100 + t)));
}

struct Result {
  std::vector<double> params, master, m, v;  // master is empty without a master copy
};

// Ten kernel steps from T-representable initial parameters, and the reference's ten steps.
template <typename T>
void run_steps(const Hyperparameters& h, bool with_master, Result& kernel, Result& expected) {
  const std::vector<double> initial = to_double(convert<T>(random_values(kCount, 1)));
  DeviceBuffer<T> d_params(convert<T>(initial)), d_grads(kCount);
  DeviceBuffer<Compute<T>> d_master(convert<Compute<T>>(initial));
  DeviceBuffer<Compute<T>> d_m(std::vector<Compute<T>>(kCount, 0)), d_v(std::vector<Compute<T>>(kCount, 0));
  expected = {initial, {}, std::vector<double>(kCount, 0.0), std::vector<double>(kCount, 0.0)};
  for (int t = 1; t <= kSteps; ++t) {
    const std::vector<double> grads = step_grads<T>(t);
    d_grads.upload(convert<T>(grads));
    adamw_update<T>(d_params.data(), with_master ? d_master.data() : nullptr, d_grads.data(), d_m.data(),
                    d_v.data(), kCount, h.learning_rate, h.beta1, h.beta2, h.eps, h.weight_decay, h.grad_scale, t,
                    rounding_of_step(t), nullptr);
    reference_step(expected.params, expected.m, expected.v, grads, h, t);
    // Without a master copy the parameters live in T between steps.
    if (!with_master) expected.params = to_double(convert<T>(expected.params));
  }
  kernel.params = to_double(d_params.to_host());
  if (with_master) kernel.master = to_double(d_master.to_host());
  kernel.m = to_double(d_m.to_host());
  kernel.v = to_double(d_v.to_host());
}

const double kWeightDecays[] = {0.0, 0.1};

TEST(AdamW, DoubleMatchesUpdateRule) {
  // The same operations in the same order: agreement to a few ulp.
  for (double weight_decay : kWeightDecays) {
    Hyperparameters h;
    h.weight_decay = weight_decay;
    Result kernel, expected;
    run_steps<double>(h, false, kernel, expected);
    EXPECT_LE(max_error_relative_to_scale(kernel.params, expected.params), 1e-14) << "weight decay " << weight_decay;
    EXPECT_LE(max_error_relative_to_scale(kernel.m, expected.m), 1e-14);
    EXPECT_LE(max_error_relative_to_scale(kernel.v, expected.v), 1e-14);
  }
}

TEST(AdamW, FloatMatchesUpdateRule) {
  // Each step rounds p (|p| <= ~1) to fp32, 2^-24 = 6e-8 of the scale; the update itself
  // (<= ~3 learning rates) carries a few ulp of its own size. Ten steps stay below 1e-6
  // of the scale; the moments likewise (fp32 beta and 1 - beta differ from the double
  // ones by ~2e-7 relative).
  for (double weight_decay : kWeightDecays) {
    Hyperparameters h;
    h.weight_decay = weight_decay;
    Result kernel, expected;
    run_steps<float>(h, false, kernel, expected);
    EXPECT_LE(max_error_relative_to_scale(kernel.params, expected.params), 1e-6) << "weight decay " << weight_decay;
    EXPECT_LE(max_error_relative_to_scale(kernel.m, expected.m), 1e-6);
    EXPECT_LE(max_error_relative_to_scale(kernel.v, expected.v), 1e-6);
  }
}

TEST(AdamW, Bf16ParamsAreTheFp32MasterCopyRoundedStochastically) {
  for (double weight_decay : kWeightDecays) {
    Hyperparameters h;
    h.weight_decay = weight_decay;
    Result kernel, expected;
    run_steps<__nv_bfloat16>(h, true, kernel, expected);
    // The master copy and moments are fp32 arithmetic on the (bf16) gradients, as for float.
    EXPECT_LE(max_error_relative_to_scale(kernel.master, expected.params), 1e-6) << "weight decay " << weight_decay;
    EXPECT_LE(max_error_relative_to_scale(kernel.m, expected.m), 1e-6);
    EXPECT_LE(max_error_relative_to_scale(kernel.v, expected.v), 1e-6);
    // The bf16 parameters are exactly the master copy rounded with the last step's bits of each
    // element's index, which is neither round to nearest nor truncation for every element.
    size_t not_nearest = 0;
    for (size_t i = 0; i < kCount; ++i) {
      const float master = float(kernel.master[i]);
      const __nv_bfloat16 rounded = round_stochastically(master, rounding_bits(rounding_of_step(kSteps).key, i));
      EXPECT_EQ(kernel.params[i], double(float(rounded))) << i;
      not_nearest += float(rounded) != float(__float2bfloat16(master));
    }
    EXPECT_GT(not_nearest, kCount / 10);
  }
}

TEST(AdamW, Bf16ParamsWithoutMasterCopyRoundEachStep) {
  // The reference rounds p to nearest after each step; the kernel rounds stochastically, up to
  // one bf16 ulp (2^-8 of |p|, and |p| <= 1 here) away, an error that later steps carry: at most
  // ten ulps after ten steps, 10 2^-8 = 3.9e-2 of the scale (measured 2.2e-2), while the moments
  // are fp32 as with a master copy.
  Hyperparameters h;
  h.weight_decay = 0.1;
  Result kernel, expected;
  run_steps<__nv_bfloat16>(h, false, kernel, expected);
  EXPECT_LE(max_error_relative_to_scale(kernel.params, expected.params), 10 * std::ldexp(1.0, -8));
  EXPECT_LE(max_error_relative_to_scale(kernel.m, expected.m), 1e-6);
  EXPECT_LE(max_error_relative_to_scale(kernel.v, expected.v), 1e-6);
}

// p after the first step from p with gradient g (no decay, no gradient scale).
template <typename T>
double first_step(double p, double g, double learning_rate, double eps) {
  DeviceBuffer<T> params(convert<T>({p})), grads(convert<T>({g}));
  DeviceBuffer<Compute<T>> m(std::vector<Compute<T>>{0}), v(std::vector<Compute<T>>{0});
  adamw_update<T>(params.data(), nullptr, grads.data(), m.data(), v.data(), 1, learning_rate, 0.9, 0.95, eps, 0.0,
                  1.0, 1, rounding_of_step(1), nullptr);
  return double(params.to_host()[0]);
}

TEST(AdamW, EpsIsAddedToTheRootOfTheSecondMoment) {
  // At t = 1 the bias corrections make m_hat = g and v_hat = g^2, so p moves by
  // lr g / (|g| + eps): with g = eps, by lr / 2 (1 - 0.995). eps inside the root would move it
  // by lr g / sqrt(g^2 + eps) = lr / 100.5, no eps by lr. fp32: a few roundings, ~1e-7.
  const double g = 1e-4, eps = 1e-4, lr = 1e-2;
  EXPECT_NEAR(first_step<double>(1.0, g, lr, eps), 0.995, 1e-15);
  EXPECT_NEAR(first_step<float>(1.0, g, lr, eps), 0.995, 1e-6);
}

TEST(AdamW, WeightDecayShrinksOnlyTheGroupThatAsksForIt) {
  // Zero gradients: the moments stay 0 and only the decay moves p, by the factor
  // (1 - learning_rate * weight_decay) per step.
  const std::vector<double> initial = random_values(kCount, 3);
  const std::vector<double> zeros(kCount, 0.0);
  DeviceBuffer<double> decayed(initial), kept(initial), grads(zeros), m(kCount), v(kCount);
  for (DeviceBuffer<double>* moment : {&m, &v}) moment->upload(zeros);
  const double lr = 1e-2, weight_decay = 0.1;
  adamw_update<double>(decayed.data(), nullptr, grads.data(), m.data(), v.data(), kCount, lr, 0.9, 0.95, 1e-8,
                       weight_decay, 1.0, 1, rounding_of_step(1), nullptr);
  adamw_update<double>(kept.data(), nullptr, grads.data(), m.data(), v.data(), kCount, lr, 0.9, 0.95, 1e-8, 0.0,
                       1.0, 1, rounding_of_step(1), nullptr);
  const std::vector<double> decayed_host = decayed.to_host(), kept_host = kept.to_host();
  for (size_t i = 0; i < kCount; ++i) {
    EXPECT_DOUBLE_EQ(decayed_host[i], initial[i] * (1 - lr * weight_decay)) << i;
    EXPECT_EQ(kept_host[i], initial[i]) << i;
  }
}

// One step of bf16 parameters with an fp32 master copy over [first, end) of the elements,
// called as element first_index + i of the rounding's index space.
struct Bf16Tensor {
  DeviceBuffer<__nv_bfloat16> params;
  DeviceBuffer<float> master, m, v;
  DeviceBuffer<__nv_bfloat16> grads;
  explicit Bf16Tensor(const std::vector<double>& initial, const std::vector<double>& gradients)
      : params(convert<__nv_bfloat16>(initial)),
        master(convert<float>(initial)),
        m(std::vector<float>(initial.size(), 0.0f)),
        v(std::vector<float>(initial.size(), 0.0f)),
        grads(convert<__nv_bfloat16>(gradients)) {}
  void update(size_t first, size_t end, uint64_t key, double weight_decay = 0.1) {
    adamw_update<__nv_bfloat16>(params.data() + first, master.data() + first, grads.data() + first, m.data() + first,
                                v.data() + first, end - first, 1e-2, 0.9, 0.95, 1e-8, weight_decay, 1.0, 1,
                                {key, first}, nullptr);
  }
};

// What makes every pipeline layout round alike: a tensor updated in two calls, each told where
// its elements are, gets bitwise the parameters of one call over the whole.
TEST(AdamW, Bf16RoundingFollowsTheElementIndexNotTheCall) {
  const std::vector<double> initial = random_values(kCount, 5), gradients = random_values(kCount, 6);
  Bf16Tensor whole(initial, gradients), halves(initial, gradients);
  const uint64_t key = rounding_key(99, 1);
  whole.update(0, kCount, key);
  halves.update(0, 400, key);
  halves.update(400, kCount, key);
  const std::vector<__nv_bfloat16> expected = whole.params.to_host(), got = halves.params.to_host();
  for (size_t i = 0; i < kCount; ++i) EXPECT_EQ(float(got[i]), float(expected[i])) << i;
  // Another step's key rounds differently (so the key reaches the bits).
  Bf16Tensor next_step(initial, gradients);
  next_step.update(0, kCount, rounding_key(99, 2));
  EXPECT_NE(to_double(next_step.params.to_host()), to_double(expected));
}

// A parameter that stays at x (a zero gradient and no decay: m = v = 0 and no update) between
// two bf16 neighbours lo < x < hi, a fraction f = (x - lo) / (hi - lo) of the way: stochastic
// rounding takes hi with probability f, so over n elements the share rounded up is f within a
// few binomial standard deviations sqrt(f (1 - f) / n) (5 of them: 6e-3 for n = 16384, f = 0.3),
// and the mean of the rounded values is x. Round to nearest would give lo every time (share 0).
TEST(AdamW, Bf16StochasticRoundingIsUnbiased) {
  constexpr size_t n = 16384;
  const float lo = 1.0f, hi = 1.0f + 1.0f / 128, f = 0.3f;  // bf16's ulp at 1 is 2^-7
  const float x = lo + f * (hi - lo);
  Bf16Tensor tensor(std::vector<double>(n, x), std::vector<double>(n, 0.0));
  tensor.update(0, n, rounding_key(99, 1), 0.0);
  size_t up = 0, other = 0;
  for (const __nv_bfloat16 p : tensor.params.to_host()) {
    up += float(p) == hi;
    other += float(p) != hi && float(p) != lo;
  }
  EXPECT_EQ(other, 0u);
  EXPECT_NEAR(double(up) / n, f, 5 * std::sqrt(f * (1 - f) / n));
}

}  // namespace

// The stage's one launch (adamw_update_regions): regions of one allocation, with and without
// decay, each with its own place in the whole model, updated in one call are bitwise each region
// updated alone by adamw_update with its decay, the gate's scale and its rounding start.
namespace {

// Three regions, the middle one without decay; each block's elements in one or two of them.
const std::vector<AdamWRegion> kThreeRegions = {{0, 300, 5000, 1}, {300, 400, 100, 0}, {700, kCount - 700, 20000, 1}};
// Regions smaller than a block, and empty ones, decays alternating: a thread steps over several
// regions from its block's entry (block 1's first element is in the region at 5).
const std::vector<AdamWRegion> kSmallRegions = {
    {0, 1, 900, 1},     {1, 0, 0, 0},        {1, 3, 7000, 0},    {4, 1, 40, 1},    {5, 520, 3000, 0},
    {525, 0, 0, 1},     {525, 7, 12000, 1},  {532, 2, 800, 0},   {534, 100, 60, 1}, {634, 1, 9000, 0},
    {635, kCount - 635, 30000, 1}};

template <typename T>
void expect_regions_match_separate_calls(const std::vector<AdamWRegion>& regions, bool with_master) {
  const std::vector<double> initial = to_double(convert<T>(random_values(kCount, 7)));
  const double weight_decay = 0.1, lr = 1e-2, grad_scale = 0.5;
  DeviceBuffer<T> one_params(convert<T>(initial)), separate_params(convert<T>(initial)), grads(kCount);
  DeviceBuffer<Compute<T>> one_master(convert<Compute<T>>(initial)), separate_master(convert<Compute<T>>(initial));
  const std::vector<Compute<T>> zeros(kCount, 0);
  DeviceBuffer<Compute<T>> one_m(zeros), one_v(zeros), separate_m(zeros), separate_v(zeros);
  DeviceBuffer<AdamWRegion> table(regions);
  DeviceBuffer<int> blocks(adamw_block_regions(regions, kCount));
  DeviceBuffer<AdamWGate> gate(std::vector<AdamWGate>{{grad_scale, 1}});
  for (int t = 1; t <= 2; ++t) {
    grads.upload(convert<T>(step_grads<T>(t)));
    const uint64_t key = rounding_key(99, t);
    adamw_update_regions<T>(one_params.data(), with_master ? one_master.data() : nullptr, grads.data(), one_m.data(),
                            one_v.data(), kCount, table.data(), blocks.data(), lr, 0.9, 0.95, 1e-8, weight_decay,
                            gate.data(), t, key, nullptr);
    for (const AdamWRegion& r : regions)
      adamw_update<T>(separate_params.data() + r.offset, with_master ? separate_master.data() + r.offset : nullptr,
                      grads.data() + r.offset, separate_m.data() + r.offset, separate_v.data() + r.offset, r.count,
                      lr, 0.9, 0.95, 1e-8, r.decays ? weight_decay : 0.0, grad_scale, t, {key, r.full_offset},
                      nullptr);
  }
  EXPECT_EQ(to_double(one_params.to_host()), to_double(separate_params.to_host()));
  EXPECT_EQ(to_double(one_master.to_host()), to_double(separate_master.to_host()));
  EXPECT_EQ(to_double(one_m.to_host()), to_double(separate_m.to_host()));
  EXPECT_EQ(to_double(one_v.to_host()), to_double(separate_v.to_host()));
}

}  // namespace

TEST(AdamW, FloatRegionsInOneLaunchAreEachRegionsOwnUpdate) {
  expect_regions_match_separate_calls<float>(kThreeRegions, false);
}
TEST(AdamW, Bf16RegionsInOneLaunchAreEachRegionsOwnUpdate) {
  expect_regions_match_separate_calls<__nv_bfloat16>(kThreeRegions, true);
  expect_regions_match_separate_calls<__nv_bfloat16>(kThreeRegions, false);
}
TEST(AdamW, RegionsSmallerThanABlockInOneLaunchAreEachRegionsOwnUpdate) {
  expect_regions_match_separate_calls<float>(kSmallRegions, false);
  expect_regions_match_separate_calls<__nv_bfloat16>(kSmallRegions, true);
}

// The block table (adamw_block_regions) against a search of every region for the one holding each
// block's first element: one region, three, small and empty ones, regions ending on a block's
// boundary, and random layouts of many.
namespace {

// The layout of regions of these sizes, in order from 0.
std::vector<AdamWRegion> regions_of_sizes(const std::vector<size_t>& sizes) {
  std::vector<AdamWRegion> regions;
  size_t offset = 0;
  for (size_t count : sizes) {
    regions.push_back({offset, count, 0, 1});
    offset += count;
  }
  return regions;
}

int region_holding(const std::vector<AdamWRegion>& regions, size_t i) {
  for (size_t r = 0; r < regions.size(); ++r)
    if (regions[r].offset <= i && i < regions[r].offset + regions[r].count) return int(r);
  return -1;
}

}  // namespace

TEST(AdamW, BlockTableNamesTheRegionHoldingEachBlocksFirstElement) {
  std::vector<std::vector<AdamWRegion>> layouts = {regions_of_sizes({kCount}), kThreeRegions, kSmallRegions,
                                                   regions_of_sizes({512, 512, 0, 1024, 3, 509, 512})};
  std::mt19937 random(3);
  for (int layout = 0; layout < 20; ++layout) {
    std::vector<size_t> sizes;
    for (int r = 0; r < 60; ++r) {
      const unsigned kind = random() % 4;  // empty, smaller than a block, about a block, several blocks
      sizes.push_back(kind == 0 ? 0 : kind == 1 ? 1 + random() % 40 : kind == 2 ? 480 + random() % 64
                                                                                 : 1000 + random() % 3000);
    }
    sizes.push_back(1);  // the layout ends in a non-empty region
    layouts.push_back(regions_of_sizes(sizes));
  }
  for (const std::vector<AdamWRegion>& regions : layouts) {
    const size_t n = regions.back().offset + regions.back().count;
    const std::vector<int> table = adamw_block_regions(regions, n);
    ASSERT_EQ(table.size(), (n + kAdamWThreads - 1) / kAdamWThreads);
    for (size_t block = 0; block < table.size(); ++block)
      ASSERT_EQ(table[block], region_holding(regions, block * kAdamWThreads)) << "block " << block << " of " << n;
  }
}

// A gate that says not to apply the step (a non-finite loss or norm) leaves parameters, master
// weights and moments as they were.
TEST(AdamW, ClosedGateChangesNothing) {
  const std::vector<double> initial = random_values(kCount, 8);
  const std::vector<float> moments = convert<float>(random_values(kCount, 9));
  DeviceBuffer<__nv_bfloat16> params(convert<__nv_bfloat16>(initial)),
      grads(convert<__nv_bfloat16>(step_grads<float>(1)));
  DeviceBuffer<float> master(convert<float>(initial)), m(moments), v(moments);
  const std::vector<AdamWRegion> regions = {{0, kCount, 0, 1}};
  DeviceBuffer<AdamWRegion> table(regions);
  DeviceBuffer<int> blocks(adamw_block_regions(regions, kCount));
  DeviceBuffer<AdamWGate> gate(std::vector<AdamWGate>{{1.0, 0}});
  adamw_update_regions<__nv_bfloat16>(params.data(), master.data(), grads.data(), m.data(), v.data(), kCount,
                                      table.data(), blocks.data(), 1e-2, 0.9, 0.95, 1e-8, 0.1, gate.data(), 1, 7,
                                      nullptr);
  EXPECT_EQ(to_double(params.to_host()), to_double(convert<__nv_bfloat16>(initial)));
  EXPECT_EQ(to_double(master.to_host()), to_double(convert<float>(initial)));
  EXPECT_EQ(m.to_host(), moments);
  EXPECT_EQ(v.to_host(), moments);
}
