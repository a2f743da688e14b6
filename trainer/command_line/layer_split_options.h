// --layers-per-stage's two forms, a count per virtual stage or auto (the split balanced by measured
// layer costs, trainer/program/auto_layer_split.h), and what auto excludes.
#pragma once
#include <functional>
#include <string>
#include <vector>

struct LayersPerStage {
  std::vector<int> counts;  // empty: the even split, or auto
  bool automatic = false;
};

// "2,3,3,0", each entry read by parse_count (the parser's integer and bounds check), or "auto".
// Throws std::runtime_error with one line for a zero between the first and the last entries (only
// they may hold no layer: the embedding or the head alone, pipeline/layer_split.h).
LayersPerStage parse_layers_per_stage(const std::string& flag, const std::string& text,
                                      const std::function<int(const std::string& item)>& parse_count);

// "2,3,3,0", "auto" or "none" (the even split).
std::string layers_per_stage_text(const LayersPerStage& layers_per_stage);

// Throws std::runtime_error with one line when automatic: beside --pipeline-layout (both give the
// split), or with --plan-layouts or --print-memory (which plan other ranks than the run's, where
// auto measures).
void check_layer_split_options(bool automatic, bool pipeline_layout, bool plan_layouts, bool print_memory);
