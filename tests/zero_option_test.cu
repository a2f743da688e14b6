// --zero (trainer/command_line/options.h): 0 or 1; with one replica it runs as 0, and saves.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/command_line/options.h"

namespace {

std::string error_of(const std::vector<std::string>& arguments) {
  std::vector<const char*> argv = {"train"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  try {
    parse_train_options(int(argv.size()), argv.data());
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(ZeroOption, IsZeroOrOne) {
  EXPECT_EQ(error_of({"--zero", "0"}), "(no error)");
  EXPECT_EQ(error_of({"--zero", "1", "--dp", "2"}), "(no error)");
  EXPECT_EQ(error_of({"--zero", "2"}), "--zero 2 is out of range (must be 0 or 1)");
  EXPECT_EQ(error_of({"--zero", "-1"}), "--zero -1 is out of range (must be 0 or 1)");
  EXPECT_EQ(error_of({"--zero", "1", "--dp", "2", "--save", "model.bin"}), "(no error)");
}

}  // namespace
