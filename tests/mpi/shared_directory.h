// Rank 0's temporary directory, known to every rank, holding a small text to train on: for the
// MPI tests that run ./train's whole run (run_training) with files every rank reads.
#pragma once
#include <mpi.h>

#include <string>

#include "tests/file_tools.h"

struct SharedDirectory {
  TempDir own;  // every rank makes one; all use rank 0's
  std::string path;
  SharedDirectory() {
    char name[512] = {};
    own.file("").copy(name, sizeof(name) - 1);
    MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, MPI_COMM_WORLD);
    path = name;
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) {
      std::string text;
      for (int i = 0; i < 400; ++i) text += i % 7 ? "layout " : "resume\n";
      write_bytes(path + "text.txt", {text.begin(), text.end()});
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDirectory() { MPI_Barrier(MPI_COMM_WORLD); }  // rank 0's goes when every rank is done with it
};
