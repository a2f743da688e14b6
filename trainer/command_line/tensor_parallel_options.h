// The options that do not run with --tp above 1 yet (issue 33, docs/pipeline.md "Left of issue
// 33"), refused by name when the options are parsed (trainer/command_line/options.cpp).
#pragma once
#include <string>

// Throws std::runtime_error with one line naming the option that --tp tp > 1 does not run with:
// --plan-layouts. Every schedule runs at tp > 1 (docs/pipeline.md, "Tensor parallelism").
void check_tensor_parallel_options(int tp, bool plan_layouts);
