// A dry run of a pipeline step: every stage's action list (pipeline/schedule.h) executed
// against a clock instead of a GPU, to predict the step's time, each stage's bubble and
// activation memory, and to find deadlocks before any rank hangs on one.
//
// The model: a stage runs its steps in order. F and B take costs.forward / costs.backward
// (per chunk). Messages are rendezvous, as NCCL's point-to-point calls are for large
// tensors: a send and its matching receive both complete at latency after the later of the
// two is posted, and a group step completes when all of its sends and receives have. As in
// NCCL, which has no tags, the k-th send from stage a to stage b matches the k-th receive on
// b from a; if those are not the same tensor the schedule is wrong (an error, see below).
// The number of stages p is stages.size(), the chunks per stage v one more than the largest
// chunk in the lists.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

struct StepCosts {
  double forward;   // one chunk's forward of one microbatch
  double backward;  // one chunk's backward of one microbatch
  double latency;   // one message, from the later of send and receive being posted
};

struct StageSimulation {
  double busy;         // time in F and B
  double idle_share;   // 1 - busy / makespan: the stage's bubble
  int peak_in_flight;  // most (microbatch, chunk) pairs forwarded and not yet backwarded at once
};

struct Simulation {
  double makespan;                              // the last stage's finish time
  std::vector<StageSimulation> stages;          // index = stage
  std::vector<std::vector<double>> start_time;  // [stage][step], -1 for steps never reached
  // Empty when every stage reached the end of its list. Otherwise one line per unmatched
  // send or receive of a stuck step (the message, and where, if anywhere, the peer's list
  // posts the other end), then the grid with every step and the stuck steps marked.
  std::string deadlock;
};

// Throws std::runtime_error, with the grid and the step marked, for a list that breaks the
// data flow: a B before its F, a send before the compute that produces the tensor, a compute
// before the receive of its input, an action repeated, a send matched with a receive of a
// different tensor.
Simulation simulate(const std::vector<StageSchedule>& stages, const StepCosts& costs);

// The compute actions on a time axis: one column per costs.forward of time, a backward of
// k forwards' time spans k columns ("B3" then "--"), idle columns are ".". Needs a run
// without deadlock.
std::string format_timeline(const std::vector<StageSchedule>& stages, const Simulation& simulation,
                            const StepCosts& costs);
