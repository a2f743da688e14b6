// TRAIN_TEST_FAIL and TRAIN_TEST_NAN, the test-only failures (trainer/safety/failure_injection.h).
#include "trainer/safety/failure_injection.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
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

template <typename Element>
void inject_nan_if_asked(int world_rank, int t, const ParameterLayout& layout, Element* gradients,
                         cudaStream_t stream) {
  const char* setting = std::getenv("TRAIN_TEST_NAN");
  if (setting == nullptr) return;
  int rank = -1, step = -1, layer = -1, length = 0;
  char name[16] = {};
  if (std::sscanf(setting, "rank=%d,step=%d,tensor=%15[a-z0-9],layer=%d%n", &rank, &step, name, &layer, &length) != 4 ||
      setting[length] != '\0')
    throw std::runtime_error("TRAIN_TEST_NAN=" + std::string(setting) + ": expected rank=R,step=S,tensor=NAME,layer=L");
  if (rank != world_rank || step != t) return;
  for (const ParameterRegion& r : layout.regions) {
    if (r.tied_copy || std::string(parameter_tensor_name(r.tensor)) != name || r.layer != layer) continue;
    static const Element nan = Element(std::nanf(""));
    CUDA_CHECK(cudaMemcpyAsync(gradients + r.offset, &nan, sizeof(Element), cudaMemcpyHostToDevice, stream));
    return;
  }
  throw std::runtime_error("TRAIN_TEST_NAN: rank " + std::to_string(world_rank) + " holds no tensor " + name +
                           " layer " + std::to_string(layer));
}

template void inject_nan_if_asked<float>(int, int, const ParameterLayout&, float*, cudaStream_t);
template void inject_nan_if_asked<__nv_bfloat16>(int, int, const ParameterLayout&, __nv_bfloat16*, cudaStream_t);
