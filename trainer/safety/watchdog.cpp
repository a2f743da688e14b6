// The watchdog thread of a run (trainer/safety/watchdog.h).
#include "trainer/safety/watchdog.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "kernels/cuda_check.cuh"

const char* const kTrainingStepPhase = "the training step";

namespace {

using Clock = std::chrono::steady_clock;

// What counts as progress: any change of these.
struct Progress {
  int training_step;
  const char* phase;
  SchedulePosition position;
  bool operator==(const Progress& o) const {
    return training_step == o.training_step && phase == o.phase && position.walk == o.position.walk &&
           position.step == o.position.step;
  }
};

// This stage's row of the schedule grid with step `marked` bracketed.
std::string marked_row(int stage, const StageSchedule& schedule, int marked) {
  std::vector<StageSchedule> rows(stage + 1);
  rows[stage] = schedule;
  std::vector<int> marks(stage + 1, -1);
  marks[stage] = marked;
  std::string grid = format_grid_with_communication(rows, marks);
  if (!grid.empty() && grid.back() == '\n') grid.pop_back();
  return grid.substr(grid.find_last_of('\n') + 1);
}

}  // namespace

std::string stuck_report(const WatchdogIdentity& who, int training_step, double seconds, const char* phase,
                         const SchedulePosition& position, const StageSchedule& schedule) {
  std::string line = "train: error: rank " + std::to_string(who.world_rank) + " (stage " + std::to_string(who.stage) +
                     ", replica " + std::to_string(who.replica) + "): step " + std::to_string(training_step) +
                     ", stuck " + std::to_string(int(seconds + 0.5)) + " s in ";
  if (position.step < 0) {
    const bool after_schedule = phase == kTrainingStepPhase;
    return line + (after_schedule ? "the step's gradient sums, norm and loss sum, after its schedule" : phase);
  }
  return line + to_text(schedule[position.step]) + ", step " + std::to_string(position.step + 1) + " of " +
         std::to_string(schedule.size()) + " of its schedule\n" + marked_row(who.stage, schedule, position.step);
}

struct Watchdog {
  std::mutex mutex;
  std::condition_variable stop_requested;
  bool stopping = false;
  std::thread thread;
};

namespace {

// `device` is the rank's: a thread that made CUDA calls without selecting it would use device 0
// and open a context there, on every rank (CUDA Programming Guide, "Initialization").
template <typename Element>
void watch(Watchdog* dog, int device, double timeout_s, WatchdogIdentity who, const Executor<Element>* executor,
           const RunActivity* activity, std::function<void(const std::string&)> on_stuck) {
  CUDA_CHECK(cudaSetDevice(device));
  // A tenth of the timeout, so a report comes at most 10% late, and no more than 4 wake-ups a second.
  const auto poll = std::chrono::duration<double>(std::max(0.25, std::min(1.0, timeout_s / 10)));
  Progress last{-1, nullptr, {0, -1}};
  Clock::time_point since = Clock::now();
  std::unique_lock<std::mutex> lock(dog->mutex);
  // The clock is read before the progress is asked for, and `since` after a move is seen: a thread
  // stopped between the two (a loaded machine) makes the stillness counted shorter, never longer,
  // so the watchdog fires only when nothing moved for at least the timeout.
  while (!dog->stop_requested.wait_for(lock, poll, [dog] { return dog->stopping; })) {
    const Clock::time_point asked = Clock::now();
    const Progress now{activity->training_step.load(), activity->phase.load(), schedule_position(*executor)};
    if (!(now == last) || !activity->watched.load()) {
      last = now;
      since = Clock::now();
      continue;
    }
    const double allowance = now.training_step <= 1 ? kFirstStepAllowance * timeout_s : timeout_s;
    const double seconds = std::chrono::duration<double>(asked - since).count();
    if (seconds < allowance) continue;
    lock.unlock();  // on_stuck ends the process; stop_watchdog must not wait for the lock meanwhile
    on_stuck(stuck_report(who, now.training_step, seconds, now.phase, now.position, executor->schedule));
    return;
  }
}

}  // namespace

template <typename Element>
Watchdog* start_watchdog(double timeout_s, const WatchdogIdentity& who, const Executor<Element>& executor,
                         const RunActivity& activity, std::function<void(const std::string& report)> on_stuck) {
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  Watchdog* dog = new Watchdog;
  dog->thread = std::thread(watch<Element>, dog, device, timeout_s, who, &executor, &activity, std::move(on_stuck));
  return dog;
}

void stop_watchdog(Watchdog* dog) {
  if (dog == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(dog->mutex);
    dog->stopping = true;
  }
  dog->stop_requested.notify_all();
  dog->thread.join();
  delete dog;
}

template Watchdog* start_watchdog<float>(double, const WatchdogIdentity&, const Executor<float>&, const RunActivity&,
                                         std::function<void(const std::string&)>);
template Watchdog* start_watchdog<__nv_bfloat16>(double, const WatchdogIdentity&, const Executor<__nv_bfloat16>&,
                                                 const RunActivity&, std::function<void(const std::string&)>);
