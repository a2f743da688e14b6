// --pipeline-layout STRING: where the embedding, each transformer layer and the head sit, as
// one string in virtual-stage order, after Megatron-LM's --pipeline-model-parallel-layout:
//
//   E        the embedding (token and position tables), which opens the first virtual stage
//   t        one transformer layer
//   L        the head: final LayerNorm, tied output projection and loss, closing the last one
//   |        the border between two virtual stages, in virtual-stage order (stage 0 first;
//            which rank and chunk runs virtual stage i is the schedule's placement)
//   X*N      X repeated N times (N from 1 up); X is one symbol or a parenthesised group:
//            "(t*2|)*3" is "t t | t t | t t |"
//   blanks   ignored
//
// "Et*3|t*3|t*3|t*3L" is 4 virtual stages of 3 layers; "E|t*4|t*4|t*3L" leaves the first stage
// the embedding alone. The string becomes the layer counts split_layers checks and cuts
// (pipeline/layer_split.h), so the trainer, the memory plan and the checkpoints follow it.
// E and L may sit only where model/ places them (the embedding on virtual stage 0, the head on
// the last); a first or last stage may hold no transformer layer, the stages between need one.
// Every error is one std::runtime_error line "--pipeline-layout: column N: ..." pointing at the
// offending character (1-based, blanks counted).
#pragma once

#include <string>
#include <vector>

// Parses the string and checks what it can alone (syntax, E and L, empty middle stages);
// returns the transformer layers of each virtual stage, in virtual-stage order.
std::vector<int> parse_pipeline_layout(const std::string& text);

// parse_pipeline_layout, also checked against a run: p stages x v chunks virtual stages (the
// schedule's) and num_layers transformer layers (--layers).
std::vector<int> pipeline_layout_counts(const std::string& text, int p, int v, int num_layers);
