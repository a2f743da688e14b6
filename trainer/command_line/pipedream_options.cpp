// The options of the asynchronous pipeline (trainer/command_line/pipedream_options.h).
#include "trainer/command_line/pipedream_options.h"

#include <stdexcept>

void check_pipedream_options(bool pipedream, bool vertical_sync, float grad_clip,
                             const std::vector<std::string>& not_built, const std::set<std::string>& given) {
  for (const char* name : {"update-every", "weight-stashing", "vertical-sync"})
    if (!pipedream && given.count(name))
      throw std::runtime_error(std::string("--") + name + " needs --schedule pipedream");
  if (!pipedream) return;
  // Clipping needs every stage's gradient of the same update. With vertical sync, stage 0's backward
  // that completes update v runs before any stage first uses version v, so each stage can apply v
  // then, with the whole norm; without it a stage would wait for stage 0 at each update.
  if (grad_clip > 0 && !vertical_sync)
    throw std::runtime_error("--schedule pipedream clips the global gradient norm only with --vertical-sync (without it a "
                             "stage would wait for stage 0 at every update): add --vertical-sync or --grad-clip 0");
  if (!not_built.empty())
    throw std::runtime_error("--schedule pipedream does not run with " + not_built.front() + " yet (issue 37)");
}
