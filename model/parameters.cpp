// Sizes, names and GPT-2 initialisation of the parameter tensors (model/parameters.h).
#include "model/parameters.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace {

constexpr double kInitStd = 0.02;

// splitmix64's finaliser: spreads nearby inputs (tensor 3, tensor 4) over unrelated seeds.
uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Standard normals from one mt19937_64 by Box-Muller, both values of each pair.
class NormalStream {
 public:
  explicit NormalStream(uint64_t seed) : rng_(seed) {}
  double next() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double two_pi = 6.283185307179586476925286766559;
    const double u1 = double((rng_() >> 11) + 1) * 0x1.0p-53;  // (0, 1]: log(u1) is finite
    const double u2 = double(rng_() >> 11) * 0x1.0p-53;        // [0, 1)
    const double radius = std::sqrt(-2.0 * std::log(u1));
    spare_ = radius * std::sin(two_pi * u2);
    has_spare_ = true;
    return radius * std::cos(two_pi * u2);
  }

 private:
  std::mt19937_64 rng_;
  double spare_ = 0.0;
  bool has_spare_ = false;
};

// n values N(0, std^2) from the stream of (seed, tensor, layer).
void fill_normal(float* out, size_t n, double std, uint64_t seed, int tensor, int layer) {
  NormalStream normal(splitmix64(seed ^ splitmix64((uint64_t(tensor) << 32) | uint32_t(layer))));
  for (size_t i = 0; i < n; ++i) out[i] = float(std * normal.next());
}

}  // namespace

std::array<size_t, kNumParameterTensors> parameter_tensor_sizes(const GPTConfig& config) {
  const size_t Vp = config.padded_vocab_size, maxT = config.max_seq_len, L = config.num_layers, C = config.channels;
  return {Vp * C, maxT * C, L * C,         L * C,     L * 3 * C * C, L * 3 * C, L * C * C, L * C,
          L * C,  L * C,    L * 4 * C * C, L * 4 * C, L * C * 4 * C, L * C,     C,         C};
}

std::array<size_t, kNumParameterTensors> parameter_tensor_offsets(const GPTConfig& config) {
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  std::array<size_t, kNumParameterTensors> offsets;
  size_t offset = 0;
  for (int i = 0; i < kNumParameterTensors; ++i) {
    offsets[i] = offset;
    offset += sizes[i];
  }
  return offsets;
}

size_t num_parameters(const GPTConfig& config) {
  size_t total = 0;
  for (size_t size : parameter_tensor_sizes(config)) total += size;
  return total;
}

size_t parameters_per_layer(const GPTConfig& config) {
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  size_t total = 0;
  for (int i = 0; i < kNumParameterTensors; ++i)
    if (parameter_tensor_is_per_layer(i)) total += sizes[i] / config.num_layers;
  return total;
}

const char* parameter_tensor_name(int tensor) {
  static const char* const names[kNumParameterTensors] = {"wte",      "wpe",      "ln1w", "ln1b", "qkvw", "qkvb",
                                                          "attprojw", "attprojb", "ln2w", "ln2b", "fcw",  "fcb",
                                                          "fcprojw",  "fcprojb",  "lnfw", "lnfb"};
  return names[tensor];
}

bool parameter_tensor_is_per_layer(int tensor) { return tensor >= kLn1w && tensor <= kFcprojb; }

bool parameter_tensor_has_weight_decay(int tensor) {
  return tensor == kWte || tensor == kWpe || tensor == kQkvw || tensor == kAttprojw || tensor == kFcw ||
         tensor == kFcprojw;
}

void init_gpt2_parameters(std::vector<float>& host, const GPTConfig& config, uint64_t seed) {
  host.assign(num_parameters(config), 0.0f);
  const ParameterTensors<float> p = point_views(host.data(), config);
  const std::array<size_t, kNumParameterTensors> sizes = parameter_tensor_sizes(config);
  const size_t C = config.channels;
  const int L = config.num_layers;
  const double residual_std = kInitStd / std::sqrt(2.0 * L);

  fill_normal(p.wte, size_t(config.vocab_size) * C, kInitStd, seed, kWte, 0);  // padded rows stay 0
  fill_normal(p.wpe, sizes[kWpe], kInitStd, seed, kWpe, 0);
  for (int i = kLn1w; i <= kFcprojb; ++i) {
    const size_t per_layer = sizes[i] / L;
    float* tensor = tensor_view(p, i);
    for (int l = 0; l < L; ++l) {
      float* slice = tensor + l * per_layer;
      if (i == kLn1w || i == kLn2w) {
        std::fill(slice, slice + per_layer, 1.0f);
      } else if (i == kQkvw || i == kFcw) {
        fill_normal(slice, per_layer, kInitStd, seed, i, l);
      } else if (i == kAttprojw || i == kFcprojw) {
        fill_normal(slice, per_layer, residual_std, seed, i, l);
      }  // biases stay 0
    }
  }
  std::fill(p.lnfw, p.lnfw + C, 1.0f);
}
