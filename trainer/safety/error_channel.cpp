// A failing rank's line to world rank 0, which prints it and aborts the job (trainer/safety/error_channel.h).
#include "trainer/safety/error_channel.h"

#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>

namespace {

constexpr int kFailureTag = 1;
constexpr int kMessageBytes = 4000;

// How often rank 0's listener looks for a message. A line printed 50 ms after it arrived is as
// good as at once for a person; 20 wake-ups a second cost nothing measurable. (A blocking receive
// would spin a CPU core for the whole run in MPICH.)
constexpr auto kPollInterval = std::chrono::milliseconds(50);

// How long a failing rank waits for rank 0 to print its line and abort the job before it does
// both itself. Rank 0's listener answers within one poll interval plus the time to be scheduled:
// on an oversubscribed machine (8 ranks on 2 cores, the test suite's -np 8) that can reach a few
// hundred milliseconds, so 5 s leaves a margin of ten; and if rank 0 is dead, the job still
// ends within seconds.
constexpr auto kGracePeriod = std::chrono::seconds(5);

// How long the printing rank waits before the abort, for mpirun to forward its line.
constexpr auto kForwardingTime = std::chrono::milliseconds(300);

// How long rank 0's listener goes on printing messages after the first, before it aborts the job.
// When a rank stops, its neighbours' watchdogs fire within a poll interval of each other (half a
// second at most, trainer/safety/watchdog.cpp), and their reports together show where the hang is.
constexpr auto kMoreReportsTime = std::chrono::milliseconds(1000);

}  // namespace

struct ErrorChannel {
  MPI_Comm comm;  // a duplicate of MPI_COMM_WORLD, so that no other message can match the listener's
  int rank;
  std::atomic<bool> closing{false};
  std::atomic_flag spoken;  // the one line is printed once per process
  std::thread listener;                        // world rank 0 only
};

namespace {

// Prints line and aborts the job, once: rank 0's listener and its main thread (and its
// watchdog) may all try.
[[noreturn]] void print_and_abort(ErrorChannel* channel, const std::string& line,
                                  const std::function<void()>& before_abort = {}) {
  if (!channel->spoken.test_and_set()) {
    std::fprintf(stderr, "%s\n", line.c_str());
    std::fflush(stderr);
    if (before_abort) before_abort();
    // mpirun forwards a rank's output asynchronously and drops what it has not read when the job
    // is torn down: give it a moment to read the line (seen lost about once in 16 runs without).
    std::this_thread::sleep_for(kForwardingTime);
    MPI_Abort(MPI_COMM_WORLD, 1);
    // MPICH's MPI_Abort has been seen to return (rarely, with threads inside MPI) while the job
    // went on; a rank that exits with an error makes mpirun end the others.
    std::_Exit(1);
  }
  // The other thread spoke first, and its MPI_Abort is ending this process.
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Prints every message that arrives until closing, or until kMoreReportsTime after the first
// when aborting (the first ends the job: print_and_abort prints the last one heard).
void listen(ErrorChannel* channel) {
  char message[kMessageBytes];
  MPI_Request request;
  MPI_Irecv(message, kMessageBytes, MPI_CHAR, MPI_ANY_SOURCE, kFailureTag, channel->comm, &request);
  std::optional<std::chrono::steady_clock::time_point> first_heard;
  std::string last;
  while (!channel->closing.load()) {
    int arrived = 0;
    MPI_Status status;
    MPI_Test(&request, &arrived, &status);
    if (arrived) {
      int length = 0;
      MPI_Get_count(&status, MPI_CHAR, &length);
      if (!last.empty()) std::fprintf(stderr, "%s\n", last.c_str());
      last.assign(message, length);
      if (!first_heard) first_heard = std::chrono::steady_clock::now();
      MPI_Irecv(message, kMessageBytes, MPI_CHAR, MPI_ANY_SOURCE, kFailureTag, channel->comm, &request);
    }
    if (first_heard && std::chrono::steady_clock::now() - *first_heard >= kMoreReportsTime)
      print_and_abort(channel, last);
    std::this_thread::sleep_for(kPollInterval);
  }
  MPI_Cancel(&request);
  MPI_Wait(&request, MPI_STATUS_IGNORE);
}

}  // namespace

ErrorChannel* open_error_channel() {
  ErrorChannel* channel = new ErrorChannel;
  MPI_Comm_dup(MPI_COMM_WORLD, &channel->comm);
  MPI_Comm_rank(channel->comm, &channel->rank);
  if (channel->rank == 0) channel->listener = std::thread(listen, channel);
  return channel;
}

void close_error_channel(ErrorChannel* channel) {
  // Until every rank is here, one may still fail (say, writing its part of the last checkpoint).
  MPI_Barrier(channel->comm);
  channel->closing.store(true);
  if (channel->listener.joinable()) channel->listener.join();
  MPI_Comm_free(&channel->comm);
  delete channel;
}

void fail_run(ErrorChannel* channel, const std::string& line, const std::function<void()>& before_abort) {
  // Rank 0 too sends its line to its own listener, which prints it with any other rank's.
  // The send is never waited for: rank 0 may be dead. The grace period is the wait, counted on
  // a thread of its own: before_abort (aborting communicators) may block on a GPU, whose abort
  // waits for the device, and must not keep the job from ending.
  MPI_Request request;
  MPI_Isend(line.data(), int(std::min<size_t>(line.size(), kMessageBytes)), MPI_CHAR, 0, kFailureTag, channel->comm,
            &request);
  std::thread([channel, line] {
    std::this_thread::sleep_for(kGracePeriod);
    print_and_abort(channel, line);
  }).detach();
  if (before_abort) before_abort();
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}
