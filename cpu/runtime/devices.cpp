// Visible devices and the devices a process uses (cpu/runtime/devices.h).
#include "cpu/runtime/devices.h"

#include <dlfcn.h>
#include <execinfo.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cpu/runtime/errors.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/thread_state.h"

namespace cpu {
namespace {

// The leading index of one entry, as strtoul reads it after the entry's spaces; -1 when it has
// none or a sign (PyTorch's _parse_visible_devices documents CUDA's reading the same way).
long long leading_index(const std::string& entry) {
  size_t at = 0;
  while (at < entry.size() && std::isspace(static_cast<unsigned char>(entry[at]))) ++at;
  size_t end = at;
  while (end < entry.size() && end - at < 9 && std::isdigit(static_cast<unsigned char>(entry[end]))) ++end;
  return end == at ? -1 : std::stoll(entry.substr(at, end - at));
}

uint64_t mix(uint64_t x) {  // splitmix64's finaliser
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Contexts {
  std::mutex mutex;
  std::vector<int> used;              // in the order of first use
  std::atomic<uint64_t> used_set{0};  // bit d: device d (< 64) is in used; read without the lock
};
Contexts& contexts() {
  static Contexts& c = *new Contexts;  // never freed: stream workers may outlive main
  return c;
}

// The CUDA, cuBLAS or NCCL entry point the calling thread is in ("cudaEventQuery"), found on its
// stack (the binaries link with -rdynamic, so dladdr names them); "" when there is none.
std::string api_call_on_stack() {
  void* frames[32];
  const int count = backtrace(frames, 32);
  for (int i = 0; i < count; ++i) {
    Dl_info info{};
    if (!dladdr(frames[i], &info) || !info.dli_sname) continue;
    const std::string name = info.dli_sname;
    for (const std::string prefix : {"cuda", "cublas", "nccl"})
      if (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
          std::isupper(static_cast<unsigned char>(name[prefix.size()])))
        return name;
  }
  return "";
}

}  // namespace

std::vector<int> parse_visible_devices(const std::optional<std::string>& text, int physical_devices) {
  std::vector<int> visible;
  if (!text) {
    for (int d = 0; d < physical_devices; ++d) visible.push_back(d);
    return visible;
  }
  if (text->rfind("GPU-", 0) == 0 || text->rfind("MIG-", 0) == 0)
    unsupported(("CUDA_VISIBLE_DEVICES=" + *text + " (GPU UUIDs)").c_str());
  size_t start = 0;
  while (start <= text->size()) {
    const size_t comma = std::min(text->find(',', start), text->size());
    const long long index = leading_index(text->substr(start, comma - start));
    if (index < 0 || index >= physical_devices) break;
    if (std::find(visible.begin(), visible.end(), int(index)) != visible.end()) return {};
    visible.push_back(int(index));
    start = comma + 1;
  }
  return visible;
}

int visible_device_count() { return int(parse_visible_devices(settings().visible_devices, settings().devices).size()); }

int physical_device(int device) { return parse_visible_devices(settings().visible_devices, settings().devices).at(device); }

std::array<char, 16> device_uuid(int device) {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  uint64_t host_hash = 0xcbf29ce484222325ull;  // FNV-1a
  for (const char* c = host; *c; ++c) host_hash = (host_hash ^ uint8_t(*c)) * 0x100000001b3ull;
  const uint64_t halves[2] = {mix(host_hash), mix(host_hash + 1 + uint64_t(physical_device(device)))};
  std::array<char, 16> uuid;
  std::memcpy(uuid.data(), halves, sizeof halves);
  return uuid;
}

// Called by every kernel launch and copy: a device already recorded costs one atomic load.
void use_context(int device, const char* what) {
  Contexts& c = contexts();
  if (device < 64 && (c.used_set.load(std::memory_order_relaxed) >> device & 1)) return;
  if (current_operation() != nullptr) return;
  std::lock_guard<std::mutex> lock(c.mutex);
  if (std::find(c.used.begin(), c.used.end(), device) != c.used.end()) return;
  if (int(c.used.size()) < settings().devices_per_process) {
    c.used.push_back(device);
    if (device < 64) c.used_set.fetch_or(uint64_t(1) << device);
    return;
  }
  const std::string call = api_call_on_stack();
  std::fprintf(stderr,
               "cpu: %s on device %d (the calling thread's current device) in a process that uses device %d: one "
               "process, one device, as on a GPU node (every thread calls cudaSetDevice before its first CUDA call; "
               "CUDA_CPU_DEVICES_PER_PROCESS=%d allows more)\n",
               call.empty() ? what : call.c_str(), device, c.used.front(), int(c.used.size()) + 1);
  std::abort();
}

std::vector<int> devices_used() {
  std::lock_guard<std::mutex> lock(contexts().mutex);
  return contexts().used;
}

void forget_devices_used() {
  std::lock_guard<std::mutex> lock(contexts().mutex);
  contexts().used.clear();
  contexts().used_set = 0;
}

void use_current_context(const char* what) { use_context(selected_device(), what); }
int current_device() {
  use_current_context("a CUDA call");
  return selected_device();
}
void set_current_device(int device) { select_device(device); }

}  // namespace cpu
