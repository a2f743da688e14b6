// The options of PipeDream's asynchronous pipeline (issue 37, pipeline/pipedream.h): --schedule
// pipedream, --update-every K, --weight-stashing on|off and --vertical-sync, checked against each
// other and against what the asynchronous pipeline does not run with yet, when the options are
// parsed (trainer/command_line/options.cpp). The rule's own errors (K not dividing --microbatches,
// vertical sync without stashing) are pipeline/pipedream.h's check_pipedream, which the report
// runs. docs/pipeline.md, "The asynchronous pipeline", says why.
#pragma once
#include <set>
#include <string>
#include <vector>

// Throws std::runtime_error with one line naming the option: --update-every, --weight-stashing or
// --vertical-sync given without --schedule pipedream; with it, global-norm clipping without
// vertical sync, and the first of not_built (the options given that pipedream does not run with
// yet, as "--tp 2").
void check_pipedream_options(bool pipedream, bool vertical_sync, float grad_clip,
                             const std::vector<std::string>& not_built, const std::set<std::string>& given);
