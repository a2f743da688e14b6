// The options that do not run with --tp above 1 yet (issue 33, docs/pipeline.md "Left of issue
// 33"), refused by name when the options are parsed (trainer/command_line/options.cpp).
#pragma once
#include <string>

// Throws std::runtime_error with one line naming the option that --tp tp > 1 does not run with:
// --plan-layouts. The split-backward and overlapped-pair schedules are refused by check_layout,
// which sees a schedule file's grid too (pipeline/tensor_parallel_schedule.h).
void check_tensor_parallel_options(int tp, bool plan_layouts);
