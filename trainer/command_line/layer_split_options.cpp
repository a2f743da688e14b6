// --layers-per-stage: counts or auto (trainer/command_line/layer_split_options.h).
#include "trainer/command_line/layer_split_options.h"

#include <stdexcept>

LayersPerStage parse_layers_per_stage(const std::string& flag, const std::string& text,
                                      const std::function<int(const std::string& item)>& parse_count) {
  if (text == "auto") return {{}, true};
  std::vector<int> counts;
  for (size_t begin = 0;;) {
    const size_t comma = text.find(',', begin);
    counts.push_back(parse_count(text.substr(begin, comma == std::string::npos ? std::string::npos : comma - begin)));
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  for (size_t i = 1; i + 1 < counts.size(); ++i)
    if (counts[i] == 0)
      throw std::runtime_error(flag + " " + text + " is out of range (must be at least 1 but the first and the " +
                               "last, which may be 0: the embedding or the head alone)");
  return {counts, false};
}

std::string layers_per_stage_text(const LayersPerStage& layers_per_stage) {
  if (layers_per_stage.automatic) return "auto";
  std::string list;
  for (int count : layers_per_stage.counts) list += (list.empty() ? "" : ",") + std::to_string(count);
  return list.empty() ? "none" : list;
}

void check_layer_split_options(bool automatic, bool pipeline_layout, bool plan_layouts, bool print_memory) {
  if (!automatic) return;
  if (pipeline_layout)
    throw std::runtime_error("--layers-per-stage auto and --pipeline-layout both give the split: pass one");
  if (plan_layouts || print_memory)
    throw std::runtime_error(std::string("--layers-per-stage auto measures on the run's ranks: it excludes ") +
                             (plan_layouts ? "--plan-layouts" : "--print-memory"));
}
