// How one rank's failure reaches the user and ends the whole job. A rank that fails in the middle
// of a step leaves its pipeline neighbours waiting in a transfer that will never complete, and
// on a GPU nothing wakes them: a stream waits for a receive forever. World rank 0 may be one of
// them, yet it is the rank that speaks for the run. So a thread of world rank 0 listens, on a
// communicator of its own, for failures: a failing rank (rank 0 included) sends its line there,
// and the listener prints it, and any other that comes within a second (the watchdogs of a
// stopped rank's neighbours fire together, trainer/safety/watchdog.h), then calls MPI_Abort, which ends
// every process wherever it waits.
//
//   rank 2: throws  -> fail_run: sends the line -> aborts its NCCL communicators (comm/groups.h)
//   rank 0: listener receives it -> prints "train: error: rank 2 (...) failed: ..." -> MPI_Abort
//
// The line goes first: an abort may block (on a GPU it waits for the device, so for any other
// communicator's operation still spinning there), and nothing may keep the line from rank 0.
//
// If rank 0 does not act (it died, or its listener cannot run), the failing rank prints the line
// itself and aborts the job after a grace period (error_channel.cpp says why it is that long).
// Needs MPI_THREAD_MULTIPLE (comm/rank_device.h): the listener calls MPI beside the main thread.
#pragma once
#include <functional>
#include <string>

struct ErrorChannel;

// Collective over MPI_COMM_WORLD (a world of several ranks): every rank calls it once the run's
// setup has passed, before anything that may leave a peer waiting. Starts world rank 0's listener.
ErrorChannel* open_error_channel();

// The run ended well on this rank. Collective: returns when every rank has come here, then stops
// rank 0's listener and frees the channel. A rank that fails instead of coming here is still heard.
void close_error_channel(ErrorChannel* channel);

// Ends the job with message (one line, or a few: a watchdog's report; no final newline; at most
// 4000 characters are sent) printed to stderr once, by world rank 0's listener if it can. Called
// by the rank that failed; never returns. before_abort, when given, runs on the calling thread
// once the message is on its way to rank 0: the main thread aborts its communicators there. The
// grace period runs meanwhile on a thread of its own, so an abort that blocks cannot hold the job.
[[noreturn]] void fail_run(ErrorChannel* channel, const std::string& message,
                           const std::function<void()>& before_abort = {});
