// The demangled name of a function from its address, for error messages naming a kernel.
#pragma once
#include <string>

namespace cpu {
// Exported symbols come from dladdr; local ones (static, anonymous namespace) from
// the ELF symbol table of the file that holds the address. Falls back to the address.
std::string symbol_name(const void* address);
}  // namespace cpu
