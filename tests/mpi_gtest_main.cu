// main() of the multi-rank test binary (run under mpirun): each rank takes its own device
// (comm/rank_device.h), then every rank runs every test; a test passes only if it passed on
// all ranks. Rank 0 prints the verdicts and the line "tests: N passed, M failed"; other ranks
// print only their failures, each failed assertion with its message (gtest's own printer, which
// says where and why, speaks on rank 0 alone, and a failure on rank 3 would otherwise say only
// that it failed).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <string>
#include <vector>

#include "comm/rank_device.h"

namespace {

class AllRanksVerdict : public testing::EmptyTestEventListener {
 public:
  explicit AllRanksVerdict(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& result) override {
    if (rank_ == 0 || !result.failed()) return;
    std::printf("rank %d: %s:%d: Failure\n%s\n", rank_, result.file_name() ? result.file_name() : "(unknown file)",
                result.line_number(), result.message());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    int failed_here = info.result()->Failed() ? 1 : 0, failed_anywhere = 0;
    MPI_Allreduce(&failed_here, &failed_anywhere, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    const std::string name = std::string(info.test_suite_name()) + "." + info.name();
    if (failed_anywhere) ++failed_;
    else ++passed_;
    if (rank_ == 0) std::printf("[ %s ] %s (all ranks)\n", failed_anywhere ? "FAILED" : "    OK", name.c_str());
    if (failed_here) std::printf("rank %d: %s failed\n", rank_, name.c_str());
  }
  int passed_ = 0, failed_ = 0;

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  if (!start_rank_on_own_device(&argc, &argv, "mpi_tests")) return 1;
  testing::InitGoogleTest(&argc, argv);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  testing::TestEventListeners& listeners = testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  auto* verdict = new AllRanksVerdict(rank);
  listeners.Append(verdict);
  const int local_status = RUN_ALL_TESTS();
  const int passed = verdict->passed_, failed = verdict->failed_;
  if (rank == 0) std::printf("tests: %d passed, %d failed\n", passed, failed);
  std::fflush(stdout);
  MPI_Finalize();
  return failed || local_status ? 1 : 0;
}
