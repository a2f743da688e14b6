// What `./train --schedule pipedream --print-schedule` prints (pipeline/pipedream.h): each stage's
// actions with their weight versions for the first steps, the simulator's timeline and idle share
// (over the steps shown and in a steady step, beside 1f1b's at the same p and m), and the weight
// versions each stage keeps; with --trace, the timeline of those steps as Chrome trace JSON.
#pragma once
#include <string>

struct TrainOptions;

// The report for the world's pp stages (--pp, or the world size: pipedream runs dp = tp = 1), at
// --schedule-costs. Throws std::runtime_error with one line for a --pp the world does not fit and
// for a rule pipeline/pipedream.h's check_pipedream refuses.
std::string pipedream_report(const TrainOptions& options, int world_size);
// The simulator's timeline of the steps the report shows, updates among the computes, as Chrome
// trace JSON (--print-schedule --trace FILE; pipeline/pipedream_timeline.h), one unit of cost = 1 ms.
std::string pipedream_timeline_json(const TrainOptions& options, int world_size);
