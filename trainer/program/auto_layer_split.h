// --layers-per-stage auto (issue 37 item 4): the run's layer split chosen from measured costs.
// Every rank measures each layer kind on its own device (trainer/program/layer_cost_probe.h), the
// figures are averaged over the ranks, and the partitioner (pipeline/partition_layers.h) takes the
// split whose heaviest virtual stage is lightest; a split whose memory plan does not fit a rank's
// usable memory (--memory-limit, or the device's) is not taken.
//
// Every rank must run the same split, or their transfers would not match. The figures are
// integers (nanoseconds) summed over the world, exact in a double in any order, so every rank
// computes bitwise the same mean and then the same split. The mean, not the max: every rank runs
// the same kernels on the same kind of device, so what differs between ranks is noise (and on a
// shared CPU, the load), which the mean smooths and the max would keep at its worst.
//
// The split depends on timings, so two runs may choose differently: the run prints the split it
// chose, and passing it as --layers-per-stage reproduces the run bitwise
// (tests/train_auto_split_test.py).
#pragma once
#include <string>
#include <vector>

#include "pipeline/partition_layers.h"
#include "trainer/program/layer_cost_probe.h"
#include "trainer/program/run_setup.h"

struct AutoLayerSplit {
  MeasuredLayerCosts measured;  // the mean over the world's ranks, ns
  int ranks;                    // how many ranks measured
  int update_every;             // PipeDream's K, whose updates count in a stage's time; 0: a synchronous schedule
  std::vector<int> counts, even;  // layers per virtual stage: the chosen split, split_layers' even one
  double heaviest_ns, even_heaviest_ns;  // the heaviest virtual stage's F + B per microbatch
  double step_ns, even_step_ns;          // the simulator's step with those costs (below)
};

// The partitioner's costs per microbatch: F + B (with recompute, B runs the forward again), plus
// updates_per_microbatch AdamW updates of the layer's parameters.
//
// The objective is a stage's time per microbatch in the steady state, which paces the pipeline. In
// a synchronous schedule that is F + B: its one update a step runs after the flush, outside the
// steady state (updates_per_microbatch 0, so the split is the one it always was). PipeDream has no
// flush: a stage updates after every K-th backward, in the steady state, so its period is the
// slowest stage's F + B + AdamW / K (updates_per_microbatch 1 / K). AdamW's time is its parameters'
// (memory-bound, about 7 words an element), not its compute's: the embedding's wte costs the
// embedding little F + B but as much AdamW as the head's copy, so a large vocabulary weighs on
// both ends more under PipeDream.
LayerCosts layer_costs(const MeasuredLayerCosts& measured, int layers, bool recompute, double updates_per_microbatch);
// 1 / K for PipeDream (--update-every K), 0 for every synchronous schedule.
double updates_per_microbatch(const PipelineLayout& layout);

// The predicted step of a split. A synchronous schedule's: the simulator (pipeline/simulate.h) with
// every chunk's costs those of the heaviest stage's chunks (the sum over a stage's chunks over v),
// B split evenly into I and W for the schedules that split it, as ./train --plan-layouts predicts a
// layout. PipeDream's steady step: m periods of the heaviest stage (F + B + AdamW / K), which is
// what the simulator gives a steady step at uniform costs (PipeDreamTimeline.ASteadyStepHasNoIdle...).
double predicted_step_ns(const PipelineLayout& layout, int pp, const MeasuredLayerCosts& measured, int layers,
                         const std::vector<int>& counts);

// Measures, agrees over the world and partitions (collective: every rank of the world calls it,
// after every check that could fail on some rank alone). Throws std::runtime_error with one line
// when no split fits.
AutoLayerSplit choose_auto_layer_split(const RunSetup& setup);

// What the run prints: the measured costs, the chosen split with its heaviest stage and predicted
// step, and the even split's beside it.
std::string auto_layer_split_text(const AutoLayerSplit& split);
