// `./train --schedule pipedream --print-schedule`'s report (trainer/program/pipedream_report.h): the
// first steps' actions with their versions, and per stage the simulated idle share of a steady step
// and the weight versions kept; and the rule's errors, one line each, before anything is printed.
// Host code only; runs in both builds.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

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
  // 1F1B's (p - 1) / (m + p - 1) = 3/7 against none in a steady step; p - s versions with stashing,
  // each of the default model's stage 0 (wte 256 x 128, wpe 64 x 128 and one layer of 12 C^2 + 13 C:
  // 239,232 floats) or of a middle stage (one layer: 198,272 floats).
  EXPECT_NE(report.find("stage 0: idle 0.200 over the 3 steps, 0.000 in step 2 (1f1b: 0.429 a step), weight versions "
                        "kept 4 (the live weights and 3 older: 3 x 956928 B more than 1f1b's parameters)\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("stage 1: idle 0.200 over the 3 steps, 0.000 in step 2 (1f1b: 0.429 a step), weight versions "
                        "kept 3 (the live weights and 2 older: 2 x 793088 B more than 1f1b's parameters)\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("stage 3: idle 0.200 over the 3 steps, 0.000 in step 2 (1f1b: 0.429 a step), weight versions "
                        "kept 1\n"),
            std::string::npos)
      << report;
  EXPECT_THROW(pipedream_report(parse({"--schedule", "pipedream", "--print-schedule", "--grad-clip", "0", "--pp", "2"}), 4),
               std::runtime_error);
}

TEST(PipeDreamReport, BadRulesAreRefusedInOneLine) {
  const auto report_error = [](std::vector<std::string> more) {
    std::vector<std::string> arguments = {"--schedule", "pipedream", "--print-schedule", "--grad-clip", "0"};
    arguments.insert(arguments.end(), more.begin(), more.end());
    try {
      pipedream_report(parse(arguments), 4);
    } catch (const std::runtime_error& error) {
      return std::string(error.what());
    }
    return std::string("(no error)");
  };
  EXPECT_EQ(report_error({"--update-every", "3"}),
            "--update-every 3 must divide --microbatches 4 (an update may not straddle the end of a step, where "
            "checkpoints are written)");
  EXPECT_EQ(report_error({"--weight-stashing", "off", "--vertical-sync"}),
            "--vertical-sync needs --weight-stashing on (a backward must find the version its forward used)");
  EXPECT_EQ(report_error({"--update-every", "2"}), "(no error)");
}
