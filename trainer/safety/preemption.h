// Stopping a run cleanly on a signal. A cluster that preempts a job sends SIGTERM and gives it a
// grace period; a person at the terminal presses Ctrl-C (SIGINT). mpirun forwards either to every
// rank, though not at one instant, and a signal may reach one rank only: so each rank only
// records it here, the step's one host exchange carries it to every rank (trainer/step/trainer.h's
// train_step), and every rank stops after that same step, writes the checkpoint (with --save) and
// exits with stop_exit_status. A second SIGINT ends the process at once (Ctrl-C twice); SIGTERM
// never does, however many arrive (preemption.cpp says why).
#pragma once

// Installs the handlers of SIGTERM and SIGINT. The train program does it first, before MPI_Init
// (trainer/main.cu says why).
void catch_stop_signals();

// The stop signal this process received since catch_stop_signals: SIGINT if it had both, else
// SIGTERM, else 0.
int received_stop_signal();

// The program's exit status after stopping for signal: 0 for SIGTERM (a requested stop, done
// well), 130 for SIGINT (the shell's 128 + 2, as for a program Ctrl-C ends).
int stop_exit_status(int signal);

// "SIGTERM" or "SIGINT".
const char* stop_signal_name(int signal);
