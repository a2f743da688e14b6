// main() of the single-process test binaries: runs the tests and ends with the line
// "tests: N passed, M failed" that tools/run_tests.sh adds up.
#include <gtest/gtest.h>

#include <cstdio>

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  const int status = RUN_ALL_TESTS();
  const testing::UnitTest& run = *testing::UnitTest::GetInstance();
  std::printf("tests: %d passed, %d failed\n", run.successful_test_count(), run.failed_test_count());
  return status;
}
