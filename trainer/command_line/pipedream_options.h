// The options of PipeDream's asynchronous pipeline (issue 37, pipeline/pipedream.h): --schedule
// pipedream, --update-every K, --weight-stashing on|off and --vertical-sync, checked against each
// other and against what the asynchronous pipeline does not run with yet, when the options are
// parsed (trainer/command_line/options.cpp). docs/pipeline.md, "The asynchronous pipeline", says why.
#pragma once

struct TrainOptions;

// Throws std::runtime_error with one line naming the option: --update-every, --weight-stashing or
// --vertical-sync without --schedule pipedream; K not dividing --microbatches, vertical sync without
// stashing (pipeline/pipedream.h's check_pipedream); global-norm clipping without vertical sync;
// pipedream with an option it does not run with yet (--dp or --tp above 1, --zero 1, --dtype bf16,
// --recompute, --save, --resume, --init, --documents, --layers-per-stage auto, --print-memory,
// --trace); and pipedream without --print-schedule, whose executor is not built yet.
void check_pipedream_options(const TrainOptions& options);
