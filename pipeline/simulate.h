// A dry run of a pipeline step: every stage's action list (pipeline/schedule.h) executed
// against a clock instead of a GPU, to predict the step's time, each stage's bubble and
// activation memory, and to find deadlocks before any rank hangs on one.
//
// The model: a stage runs its steps in order. F, I and W take costs.forward, backward_input and
// backward_weight (per chunk); a fused B takes backward_input + backward_weight. An overlapped pair
// (pipeline/action.h) is one slot of two concurrent computes: both start when the stage reaches
// the pair and end together, pair_time later (costs.pair); its two computes' slots are held at
// once, so the peaks count the forward's before the backward gives its back. Messages are
// rendezvous, as NCCL's point-to-point calls are for large tensors: a send and its matching
// receive both complete at latency after the later of the two is posted, and a group step
// completes when all of its sends and receives have. As in NCCL, which has no tags, the k-th send
// from stage a to stage b matches the k-th receive on b from a; if those are not the same tensor
// the schedule is wrong (an error, see below). The number of stages p is stages.size(), the
// chunks per stage v one more than the largest chunk in the lists (2 in the v placement), and
// placement says where each virtual stage lives.
#pragma once

#include <string>
#include <vector>

#include "pipeline/schedule.h"

// How long an overlapped pair (pipeline/action.h) takes: sum, the two costs added, as on one GPU
// whose SMs the two streams share (DeepSeek's gain is the communication hidden under the other
// compute, not two computes for the price of one); max, the longer one, as if each stream had a
// GPU of its own (an upper bound on what overlapping can give).
enum class PairCost { sum, max };

// A microbatch's computes against one at maxT (issue 34: microbatches of different lengths).
struct LengthScale {
  double forward_and_input;  // F and I: the matrix products linear in T, the attention's T x T ones
  double weight;             // W: the weight gradients, matrix products linear in T only
};

struct StepCosts {
  double forward;          // t_f: one chunk's forward of one microbatch
  double backward_input;   // t_i: its I
  double backward_weight;  // t_w: its W; a fused B takes t_i + t_w
  double latency;          // one message, from the later of send and receive being posted
  PairCost pair = PairCost::sum;
  // Microbatch k's computes take t_f, t_i and t_w times lengths[k]; empty: every microbatch at
  // maxT. A message keeps its latency (the model's latency does not grow with the bytes).
  std::vector<LengthScale> lengths = {};
};

// The scale of a microbatch of T tokens against one of maxT, when the attention's T x T products
// are quadratic_share of a forward's work at maxT: F and I take (1 - q) r + q r^2, W takes r,
// with r = T / maxT and q = quadratic_share.
LengthScale length_scale(int T, int maxT, double quadratic_share);

// The time of one compute (F, B, I or W) of its microbatch, and of a pair's slot from its two
// computes' times. Throws for a microbatch that costs.lengths, when given, does not hold.
double compute_time(const StepCosts& costs, const Action& compute);
double pair_time(const StepCosts& costs, double first, double second);

struct StageSimulation {
  double busy;         // time in F, B, I and W
  double idle_share;   // 1 - busy / makespan: the stage's bubble
  // Most (microbatch, chunk) slots held at once: from the input's arrival (its receive, the first
  // virtual stage's forward, or a local hand-over's forward) until B or I, as the executor holds them.
  int peak_in_flight;
  int peak_pending;    // most (microbatch, chunk) pairs through I and not yet through W at once
  // The same per chunk (the executor's pools are per chunk: it allocates the sum of these peaks);
  // filled by simulate only.
  std::vector<int> chunk_peak_in_flight, chunk_peak_pending;
};

// A message of a schedule: the step of the stage that sends it and the step of the stage that
// receives it, matched as NCCL matches them.
struct MessageLink {
  int send_stage, send_step;
  int recv_stage, recv_step;
  std::string name;  // the send's action, "sF3.1"
};

struct Simulation {
  double makespan;                              // the last stage's finish time
  std::vector<StageSimulation> stages;          // index = stage
  std::vector<std::vector<double>> start_time;  // [stage][step], -1 for steps never reached
  std::vector<std::vector<double>> end_time;    // [stage][step], -1 for steps never completed
  std::vector<MessageLink> messages;            // every matched send and receive, in sending order per channel
  // Empty when every stage reached the end of its list. Otherwise one line per unmatched
  // send or receive of a stuck step (the message, and where, if anywhere, the peer's list
  // posts the other end), then the grid with every step and the stuck steps marked.
  std::string deadlock;
};

// Throws std::runtime_error, with the grid and the step marked, for a list that breaks the
// data flow: a B or I before its F, a W before its I, both B and I for one microbatch and chunk,
// a send before the compute that produces the tensor, a compute before the receive of its input
// (or, for a local hand-over, before the neighbouring chunk's compute), an action repeated, a
// message between two chunks of one stage, a send matched with a receive of a different tensor.
Simulation simulate(const std::vector<StageSchedule>& stages, const StepCosts& costs,
                    PlacementKind placement = PlacementKind::ring);

// The same compute orders with transfers that hold no stage (a transfer stream beside the
// compute stream, as in the zero-bubble paper and torch.distributed.pipelining): each compute
// starts when its stage is free and its input is there, latency after the compute that produced
// it on another stage ended (at once on the same stage). No group steps: compute[s] is stage s's
// compute order (F, B, I, W). Slots count from the forward (peak_in_flight), messages are
// not listed, and start_time and end_time are per compute. deadlock, when the orders wait for
// each other in a cycle, names each stuck compute and what it waits for, then the grid with
// the stuck computes marked. Throws, with the grid and the compute marked, for the data-flow
// errors simulate names.
Simulation simulate_dataflow(const std::vector<std::vector<Action>>& compute, const StepCosts& costs,
                             PlacementKind placement = PlacementKind::ring);

// The list as the executor runs it (pipeline/execute.h): computes in list order on the compute
// stream, groups in list order on one transfer stream beside it. A compute starts when the stage's
// previous compute has ended and the group holding its input's receive has completed; a group is
// posted when the stage's previous group has completed and the computes producing its sends have
// ended, and completes latency after the later of it and each peer group is posted (the rendezvous
// of simulate). start_time of a group is when it is posted. The list must pass simulate, whose
// errors, deadlock, messages and peaks this returns: every wait here points to an earlier step of
// the list, so a list that runs one step at a time runs here too. Not modelled: the executor's
// waits for a pool buffer (a receive for the last reader of its buffer, a compute for a pending
// send from the buffer it overwrites).
Simulation simulate_transfer_stream(const std::vector<StageSchedule>& stages, const StepCosts& costs,
                                    PlacementKind placement = PlacementKind::ring);

// The compute actions on a time axis: one column per timeline_column(costs) of time, an action of
// k columns' time spans k (at least one: "B3" then "--"), idle columns are ".". Needs a run
// without deadlock.
double timeline_column(const StepCosts& costs);  // t_f of the shortest microbatch (costs.lengths)
std::string format_timeline(const std::vector<StageSchedule>& stages, const Simulation& simulation,
                            const StepCosts& costs);
// The same for simulate_dataflow's run of compute orders.
std::string format_timeline(const std::vector<std::vector<Action>>& compute, const Simulation& simulation,
                            const StepCosts& costs);
