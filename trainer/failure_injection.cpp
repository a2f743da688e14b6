// TRAIN_TEST_FAIL, the test-only failure (trainer/failure_injection.h).
#include "trainer/failure_injection.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>

void fail_if_injected(int world_rank, int t) {
  const char* setting = std::getenv("TRAIN_TEST_FAIL");
  if (setting == nullptr) return;
  int rank = -1, step = -1, length = 0;
  if (std::sscanf(setting, "rank=%d,step=%d%n", &rank, &step, &length) != 2 || setting[length] != '\0')
    throw std::runtime_error("TRAIN_TEST_FAIL=" + std::string(setting) + ": expected rank=R,step=S");
  if (rank == world_rank && step == t)
    throw std::runtime_error("TRAIN_TEST_FAIL: the failure injected in step " + std::to_string(t));
}
