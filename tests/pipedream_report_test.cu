// `./train --schedule pipedream --print-schedule`'s report (trainer/program/pipedream_report.h): the
// first steps' actions with their versions, and per stage the simulated idle share of a steady step
// and the weight versions kept. Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <string>

#include "tests/options_parsing.h"
#include "trainer/program/pipedream_report.h"

TEST(PipeDreamReport, ShowsVersionsAndASteadyStepWithoutIdle) {
  const std::string report =
      pipedream_report(parse({"--schedule", "pipedream", "--print-schedule", "--grad-clip", "0"}), 4);
  EXPECT_NE(report.find("pipedream schedule, p = 4, m = 4 microbatches a step, an update every 1 backward, weight "
                        "stashing on, vertical sync off\n"),
            std::string::npos)
      << report;
  // Stage 0 of 4 in step 2: F(k) after k - 3 updates, B(k) with its forward's version.
  EXPECT_NE(report.find("stage 0 | F7@4   B4@1   U5     F8@5   B5@2   U6"), std::string::npos) << report;
  // 1F1B's (p - 1) / (m + p - 1) = 3/7 against none in a steady step; p - s versions with stashing.
  EXPECT_NE(report.find("stage 0: idle 0.200 over the 3 steps, 0.000 in step 2 (1f1b: 0.429 a step), weight versions "
                        "kept 4 (the live weights and 3 older)\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("stage 3: idle 0.200 over the 3 steps, 0.000 in step 2 (1f1b: 0.429 a step), weight versions "
                        "kept 1\n"),
            std::string::npos)
      << report;
  EXPECT_THROW(pipedream_report(parse({"--schedule", "pipedream", "--print-schedule", "--grad-clip", "0", "--pp", "2"}), 4),
               std::runtime_error);
}
