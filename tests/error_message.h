// The message of an expected error, for the tests that compare it with the one line the code
// promises.
#pragma once
#include <functional>
#include <stdexcept>
#include <string>

// The message of the std::runtime_error that act throws, or "(no error)".
inline std::string error_of(const std::function<void()>& act) {
  try {
    act();
  } catch (const std::runtime_error& error) {
    return error.what();
  }
  return "(no error)";
}
