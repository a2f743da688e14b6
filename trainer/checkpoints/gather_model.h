// The whole model brought together for a checkpoint: each stage of replica 0 downloads its own
// regions in llm.c's layout (trainer/step/trainer.h), and comm/'s gather puts them side by side
// on world rank 0. The save walks down only: checkpoints -> the step's downloads -> comm.
#pragma once
#include <vector>

#include "trainer/step/trainer.h"

// The full model on world rank 0, gathered from the stages of replica 0 (the other ranks get
// their own regions in llm.c's layout, zeros elsewhere). Collective over replica 0.
template <typename Element>
std::vector<float> gather_parameters(const Trainer<Element>& trainer);
// The same for the AdamW moments. With ZeRO-1 (--zero 1) each stage's replicas first bring their
// shards to the stage's replica 0: then collective over every rank.
template <typename Element>
void gather_moments(const Trainer<Element>& trainer, std::vector<float>& m, std::vector<float>& v);
// The same for the master weights (and as collective); empty when the trainer has none.
template <typename Element>
std::vector<float> gather_master_weights(const Trainer<Element>& trainer);
// The last step's gradient the same way (wte's two tied shares summed, as download_gradients
// gives it): the whole model's gradient, for a comparison with another implementation
// (tools/reference_run.cu). Collective over replica 0.
template <typename Element>
std::vector<float> gather_gradients(const Trainer<Element>& trainer);
