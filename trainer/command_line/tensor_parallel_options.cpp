// The options --tp above 1 refuses (trainer/command_line/tensor_parallel_options.h).
#include "trainer/command_line/tensor_parallel_options.h"

#include <stdexcept>
#include <string>

void check_tensor_parallel_options(int tp, bool plan_layouts) {
  if (tp == 1) return;
  const std::string option_tp = "--tp " + std::to_string(tp);
  const auto refuse = [&](const std::string& option) {
    throw std::runtime_error(option_tp + " does not run with " + option + " yet (issue 33)");
  };
  if (plan_layouts) refuse("--plan-layouts");
}
