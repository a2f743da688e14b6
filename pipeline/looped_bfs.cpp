// The looped breadth-first order (pipeline/looped_bfs.h).
#include "pipeline/looped_bfs.h"

#include <stdexcept>
#include <string>

std::vector<Action> looped_bfs_order(int p, int m, int v, int stage) {
  check_pipeline_stage(p, m, stage);
  if (v < 1) throw std::runtime_error("--virtual-stages " + std::to_string(v) + " must be at least 1");
  std::vector<Action> order;
  for (int chunk = 0; chunk < v; chunk++)
    for (int microbatch = 0; microbatch < m; microbatch++) order.push_back({ActionKind::forward, microbatch, chunk});
  for (int chunk = v - 1; chunk >= 0; chunk--)
    for (int microbatch = 0; microbatch < m; microbatch++) order.push_back({ActionKind::backward, microbatch, chunk});
  return order;
}
