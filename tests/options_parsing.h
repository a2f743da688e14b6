// Parsing the train program's options in a test: the options, or the one-line error.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/command_line/options.h"

// "train" followed by arguments, through parse_train_options.
inline TrainOptions parse(const std::vector<std::string>& arguments) {
  std::vector<const char*> argv = {"train"};
  for (const std::string& argument : arguments) argv.push_back(argument.c_str());
  return parse_train_options(static_cast<int>(argv.size()), argv.data());
}

// The error parsing them throws, or "(no error)".
inline std::string error_of(const std::vector<std::string>& arguments) {
  try {
    parse(arguments);
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}
