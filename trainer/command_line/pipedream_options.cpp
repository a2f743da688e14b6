// The options of the asynchronous pipeline (trainer/command_line/pipedream_options.h).
#include "trainer/command_line/pipedream_options.h"

#include <stdexcept>
#include <string>

#include "pipeline/pipedream.h"
#include "trainer/command_line/options.h"

void check_pipedream_options(const TrainOptions& options) {
  const bool pipedream = options.schedule == "pipedream";
  for (const char* name : {"update-every", "weight-stashing", "vertical-sync"})
    if (!pipedream && options.given.count(name))
      throw std::runtime_error(std::string("--") + name + " needs --schedule pipedream");
  if (!pipedream) return;
  check_pipedream({options.update_every, options.weight_stashing == "on", options.vertical_sync}, 1,
                  options.microbatches, options.steps);
  // Clipping needs every stage's gradient of the same update. With vertical sync, stage 0's backward
  // that completes update v runs before any stage first uses version v, so each stage can apply v
  // then, with the whole norm; without it a stage would wait for stage 0 at each update.
  if (options.grad_clip > 0 && !options.vertical_sync)
    throw std::runtime_error("--schedule pipedream clips the global gradient norm only with --vertical-sync (without it a "
                             "stage would wait for stage 0 at every update): add --vertical-sync or --grad-clip 0");
  const auto refuse = [](const std::string& option) {
    throw std::runtime_error("--schedule pipedream does not run with " + option + " yet (issue 37)");
  };
  if (options.dp > 1) refuse("--dp " + std::to_string(options.dp));
  if (options.tp > 1) refuse("--tp " + std::to_string(options.tp));
  if (options.zero == 1) refuse("--zero 1");
  if (options.dtype == "bf16") refuse("--dtype bf16");
  if (options.recompute) refuse("--recompute");
  if (!options.save.empty()) refuse("--save");
  if (!options.resume.empty()) refuse("--resume");
  if (!options.init.empty()) refuse("--init");
  if (options.documents) refuse("--documents");
  if (options.layers_per_stage_auto) refuse("--layers-per-stage auto");
  if (options.print_memory) refuse("--print-memory");
  if (!options.trace.empty()) refuse("--trace");
  if (!options.print_schedule)
    throw std::runtime_error("--schedule pipedream runs with --print-schedule only: its executor is not built yet (issue 37)");
}
