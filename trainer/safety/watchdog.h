// The watchdog of a run: a thread that wakes a few times a second and asks what this rank is
// doing: the training step, the phase the main thread says it is in, and, within a step's
// schedule, the schedule step the device is in (pipeline/execute.h's schedule_position, since
// the host queues a step's work long before the device runs it). When none of it has moved for
// the timeout, the rank is stuck: a pipeline neighbour that stopped leaves it waiting in a
// transfer that never completes, and on a GPU nothing else would ever say so. The watchdog then
// hands its report to on_stuck (trainer/program/run.cpp: send it to rank 0 and end the job; it never
// touches the communicators, which only the main thread calls), once:
//
//   train: error: rank 1 (stage 1, replica 0): step 3, stuck 5 s in sF5+rB3, step 14 of 32 of its schedule
//   stage 1 | rF0 F0 sF0+rF1 F1 ... >sF5+rB3< B4 ...
//
// Everything a step needs is allocated and every communicator connected before the watchdog starts
// (pipeline/execute.h, comm/connect.h), but the first step is the first to run each kernel and
// GEMM shape (a GPU loads its modules, cuBLAS picks algorithms), so until it is done the
// allowance is kFirstStepAllowance times the timeout (20 minutes at the default 300 s).
#pragma once
#include <atomic>
#include <functional>
#include <string>

#include "pipeline/execute.h"

constexpr double kFirstStepAllowance = 4;

// What the main thread does, published for the watchdog.
struct RunActivity {
  std::atomic<int> training_step{0};  // the optimizer step under way or last done (1, 2, ...); 0 before the first
  std::atomic<const char*> phase{"setting up"};  // a string literal naming what the rank does
  std::atomic<bool> watched{true};  // false while the rank does what may rightly take long (writing a checkpoint)
};

// The phase of a training step: within its schedule the executor's position names the step;
// outside it, the step is in its collectives.
extern const char* const kTrainingStepPhase;

struct WatchdogIdentity {
  int world_rank, stage, replica;
};

// The report for a rank stuck for `seconds` at `position` of `schedule` (position.step < 0: in
// `phase`, outside the schedule).
std::string stuck_report(const WatchdogIdentity& who, int training_step, double seconds, const char* phase,
                         const SchedulePosition& position, const StageSchedule& schedule);

struct Watchdog;
// Starts the thread (timeout_s > 0) on the calling thread's device, which it selects before it
// asks the executor anything. The executor and activity must outlive stop_watchdog.
template <typename Element>
Watchdog* start_watchdog(double timeout_s, const WatchdogIdentity& who, const Executor<Element>& executor,
                         const RunActivity& activity, std::function<void(const std::string& report)> on_stuck);
// Stops and joins the thread; nullptr does nothing.
void stop_watchdog(Watchdog* watchdog);
