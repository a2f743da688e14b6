// TRAIN_TEST_FAIL and TRAIN_TEST_NAN, the test-only failures (trainer/safety/failure_injection.h).
#include "trainer/safety/failure_injection.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>

#include "kernels/cuda_check.cuh"
#include "model/parameters.h"

namespace {

const char* point_name(FailurePoint point) {
  switch (point) {
    case FailurePoint::step_start: return "start";
    case FailurePoint::schedule_queued: return "transfers";
    case FailurePoint::data_parallel_sum: return "data-parallel-sum";
  }
  return "";
}

}  // namespace

void fail_if_injected(int world_rank, int t, FailurePoint point) {
  const char* setting = std::getenv("TRAIN_TEST_FAIL");
  if (setting == nullptr) return;
  int rank = -1, step = -1, length = 0;
  char during[32] = "start";
  const int read = std::sscanf(setting, "rank=%d,step=%d%n,during=%31[a-z-]%n", &rank, &step, &length, during, &length);
  const bool known = std::string(during) == "start" || std::string(during) == "transfers" ||
                     std::string(during) == "data-parallel-sum";
  if (read < 2 || setting[length] != '\0' || !known)
    throw std::runtime_error("TRAIN_TEST_FAIL=" + std::string(setting) +
                             ": expected rank=R,step=S[,during=start|transfers|data-parallel-sum]");
  if (rank == world_rank && step == t && std::string(during) == point_name(point))
    throw std::runtime_error("TRAIN_TEST_FAIL: the failure injected in step " + std::to_string(t) +
                             (point == FailurePoint::step_start ? "" : std::string(" during its ") + during));
}

namespace {

// TRAIN_TEST_NAN's fields: a gradient's tensor and layer, or the loss.
struct NanInjection {
  int rank = -1;
  int step = -1;
  bool into_loss = false;
  char tensor[16] = {};
  int layer = -1;
};

// TRAIN_TEST_NAN read, or nothing when unset. Throws when it is of neither form.
std::optional<NanInjection> nan_injection() {
  const char* setting = std::getenv("TRAIN_TEST_NAN");
  if (setting == nullptr) return std::nullopt;
  NanInjection injection;
  int length = 0;
  const bool gradient = std::sscanf(setting, "rank=%d,step=%d,tensor=%15[a-z0-9],layer=%d%n", &injection.rank,
                                    &injection.step, injection.tensor, &injection.layer, &length) == 4 &&
                        setting[length] == '\0';
  length = 0;
  injection.into_loss = !gradient &&
                        std::sscanf(setting, "rank=%d,step=%d,tensor=loss%n", &injection.rank, &injection.step,
                                    &length) == 2 &&
                        length > 0 && setting[length] == '\0';
  if (!gradient && !injection.into_loss)
    throw std::runtime_error("TRAIN_TEST_NAN=" + std::string(setting) +
                             ": expected rank=R,step=S,tensor=NAME,layer=L or rank=R,step=S,tensor=loss");
  return injection;
}

}  // namespace

template <typename Element>
void inject_nan_if_asked(int world_rank, int t, const ParameterLayout& layout, Element* gradients,
                         cudaStream_t stream) {
  const std::optional<NanInjection> injection = nan_injection();
  if (!injection || injection->into_loss || injection->rank != world_rank || injection->step != t) return;
  for (const ParameterRegion& r : layout.regions) {
    if (r.tied_copy || std::string(parameter_tensor_name(r.tensor)) != injection->tensor || r.layer != injection->layer)
      continue;
    static const Element nan = Element(std::nanf(""));
    CUDA_CHECK(cudaMemcpyAsync(gradients + r.offset, &nan, sizeof(Element), cudaMemcpyHostToDevice, stream));
    return;
  }
  throw std::runtime_error("TRAIN_TEST_NAN: rank " + std::to_string(world_rank) + " holds no tensor " +
                           injection->tensor + " layer " + std::to_string(injection->layer));
}

void inject_loss_nan_if_asked(int world_rank, int t, bool holds_losses, double* loss_sum, cudaStream_t stream) {
  const std::optional<NanInjection> injection = nan_injection();
  if (!injection || !injection->into_loss || injection->rank != world_rank || injection->step != t) return;
  if (!holds_losses)
    throw std::runtime_error("TRAIN_TEST_NAN: rank " + std::to_string(world_rank) +
                             " holds no losses (its stage has no head)");
  static const double nan = std::nan("");
  CUDA_CHECK(cudaMemcpyAsync(loss_sum, &nan, sizeof(double), cudaMemcpyHostToDevice, stream));
}

template void inject_nan_if_asked<float>(int, int, const ParameterLayout&, float*, cudaStream_t);
template void inject_nan_if_asked<__nv_bfloat16>(int, int, const ParameterLayout&, __nv_bfloat16*, cudaStream_t);
