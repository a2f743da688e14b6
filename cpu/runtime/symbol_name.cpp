// Names kernels in error messages (cpu/runtime/symbol_name.h). Slow (reads the ELF file),
// so only used when something has gone wrong.
#include "cpu/runtime/symbol_name.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <vector>

namespace cpu {
namespace {

std::string demangle(const char* name) {
  int status = 0;
  char* text = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 ? text : name;
  std::free(text);
  return out;
}

// Looks `offset` up among the FUNC symbols of the ELF file `path`.
std::string local_symbol(const char* path, uint64_t address, uint64_t base) {
  std::ifstream file(path, std::ios::binary);
  std::vector<char> elf((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (elf.size() < sizeof(Elf64_Ehdr)) return "";
  const auto* header = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
  const uint64_t wanted = header->e_type == ET_DYN ? address - base : address;
  if (header->e_shoff + uint64_t(header->e_shnum) * sizeof(Elf64_Shdr) > elf.size()) return "";
  const auto* sections = reinterpret_cast<const Elf64_Shdr*>(elf.data() + header->e_shoff);
  for (int s = 0; s < header->e_shnum; ++s) {
    if (sections[s].sh_type != SHT_SYMTAB) continue;
    const Elf64_Shdr& strings = sections[sections[s].sh_link];
    const auto* symbols = reinterpret_cast<const Elf64_Sym*>(elf.data() + sections[s].sh_offset);
    const size_t count = sections[s].sh_size / sizeof(Elf64_Sym);
    for (size_t i = 0; i < count; ++i)
      if (ELF64_ST_TYPE(symbols[i].st_info) == STT_FUNC && symbols[i].st_value == wanted)
        return demangle(elf.data() + strings.sh_offset + symbols[i].st_name);
  }
  return "";
}

}  // namespace

std::string symbol_name(const void* address) {
  Dl_info info{};
  if (dladdr(address, &info)) {
    if (info.dli_sname) return demangle(info.dli_sname);
    if (info.dli_fname) {
      const auto at = reinterpret_cast<uint64_t>(address), base = reinterpret_cast<uint64_t>(info.dli_fbase);
      for (const char* path : {info.dli_fname, "/proc/self/exe"})
        if (std::string name = local_symbol(path, at, base); !name.empty()) return name;
    }
  }
  char text[32];
  std::snprintf(text, sizeof text, "%p", address);
  return text;
}

}  // namespace cpu
