// The stop signals' handlers and what they recorded (trainer/safety/preemption.h).
#include "trainer/safety/preemption.h"

#include <csignal>

namespace {

// Written by the handler, read by the main thread: a lock-free atomic is async-signal-safe.
volatile std::sig_atomic_t received_term = 0;
volatile std::sig_atomic_t received_int = 0;

void on_stop_signal(int signal) {
  if (signal == SIGINT && received_int) {
    // A second Ctrl-C: the person at the terminal means now. The default action ends the process.
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  // SIGTERM never ends the process here, however often it comes: schedulers deliver one request
  // more than once (Slurm signals every process of the job, mpirun included, which forwards it to
  // the ranks again, and signals again when the grace period ends), and what means now comes as
  // SIGKILL after the grace period.
  (signal == SIGINT ? received_int : received_term) = 1;
}

}  // namespace

void catch_stop_signals() {
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal does not make a blocking call in MPI fail with EINTR
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
}

int received_stop_signal() { return received_int ? SIGINT : received_term ? SIGTERM : 0; }

int stop_exit_status(int signal) { return signal == SIGINT ? 128 + SIGINT : 0; }

const char* stop_signal_name(int signal) { return signal == SIGINT ? "SIGINT" : "SIGTERM"; }
