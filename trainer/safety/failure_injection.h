// Test only: failures on demand, set by environment variables that no real run sets (unset, they
// do nothing).
//
// TRAIN_TEST_FAIL="rank=R,step=S[,during=P]" checks that a rank failing in the middle of a step
// ends the whole job quickly and says so (tests/train_failure_test.py): world rank R throws in
// optimizer step S at point P: start (the default), after the step has begun on the device and
// before the stage's first transfer, so that its pipeline neighbours wait in transfers that never
// come; transfers, once the step's schedule is queued, its transfer groups in flight on the device;
// data-parallel-sum, once the step's first gradient bucket is queued (dp > 1), its all-reduce in
// flight. In the last two the rank has NCCL operations running when it aborts its communicators
// (comm/groups.h), after its report (trainer/safety/error_channel.h).
//
// TRAIN_TEST_NAN="rank=R,step=S,tensor=NAME,layer=L" checks the non-finite guard's gradient half
// (tests/mpi/guard_test.cu, tests/train_stop_test.py): world rank R writes a NaN into the first
// element of its gradient of tensor NAME (llm.c's name: wte, fcw, ...) at layer L (0 for the
// tensors outside the layers) in step S, after the gradients are zeroed and before the schedule,
// which only adds to them (the data-parallel sum of a layer starts during the schedule,
// comm/data_parallel_sum.h). With --schedule pipedream S names an update (1, 2, ...): the NaN is
// written when the rank's gradient of that update is complete, before its sums and its norm
// (trainer/step/pipedream_updates.h).
// TRAIN_TEST_NAN="rank=R,step=S,tensor=loss" checks its loss half: world rank R (a stage with the
// head, which holds losses) writes a NaN into its loss sum of step S once the schedule is queued,
// before the step's decision reads it. The gradients stay finite, so only the count of ranks with
// a non-finite loss can skip the step.
#pragma once
#include <cuda_runtime.h>

#include "model/parameter_layout.h"

enum class FailurePoint { step_start, schedule_queued, data_parallel_sum };

// Throws std::runtime_error when TRAIN_TEST_FAIL names this rank, step (t = 1, 2, ...) and point,
// or is not of the form above.
void fail_if_injected(int world_rank, int t, FailurePoint point = FailurePoint::step_start);

// Writes the NaN when TRAIN_TEST_NAN names a gradient, this rank and step (gradients: the stage
// allocation of layout, on the device). Throws std::runtime_error when it is malformed or names a
// tensor the rank does not hold.
template <typename Element>
void inject_nan_if_asked(int world_rank, int t, const ParameterLayout& layout, Element* gradients,
                         cudaStream_t stream);

// Writes the NaN into loss_sum (device, 1) when TRAIN_TEST_NAN names tensor loss, this rank and
// step. Throws std::runtime_error when it is malformed or names a rank without losses (holds_losses:
// the rank's stage has the head).
void inject_loss_nan_if_asked(int world_rank, int t, bool holds_losses, double* loss_sum, cudaStream_t stream);
