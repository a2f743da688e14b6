// Device and pinned host memory of the CPU build (cpu/runtime/memory.h), and the fault report of strict mode.
#include "cpu/runtime/memory.h"

#include <execinfo.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cpu/check/sanitizer.h"
#include "cpu/runtime/devices.h"
#include "cpu/runtime/errors.h"
#include "cpu/runtime/settings.h"
#include "cpu/runtime/symbol_name.h"
#include "cpu/runtime/thread_state.h"

namespace cpu {
namespace {

std::mutex memory_mutex;
struct Held {
  Allocation allocation;
  size_t mapped_bytes;  // strict mode's pages (munmap), else 0 (free)
};
std::map<const char*, Held> allocations;  // by start
std::vector<DeviceMemory> usage;                // per device
std::map<const char*, size_t> pinned;  // start -> bytes

// Strict mode: one protection key per device (0: none yet), allocated on the device's first
// allocation; or, where there are none (pkey_alloc fails), page protection (cpu/runtime/memory.h).
std::atomic<int> device_keys[64];
std::atomic<bool> by_pages{false};
bool pages_open[64] = {};  // per device: whether its stream operations are in flight (memory_mutex)
std::once_flag fault_handler_installed;
struct sigaction previous_handler;

size_t page_rounded(size_t bytes) {
  const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return (bytes + page - 1) / page * page;
}

// Writes to stderr without allocating: it runs inside the fault handler.
void write_error(const char* text) { [[maybe_unused]] ssize_t n = write(STDERR_FILENO, text, std::strlen(text)); }

// The allocation whose pages hold `address` ({nullptr, 0, -1} if none, or if the lock is taken:
// the fault handler must not wait).
Allocation allocation_of_page(const char* address) {
  Allocation a{nullptr, 0, -1};
  if (memory_mutex.try_lock()) {
    auto it = allocations.upper_bound(address);
    if (it != allocations.begin()) {
      const Held& held = std::prev(it)->second;
      if (address < held.allocation.start + std::max(held.allocation.bytes, held.mapped_bytes)) a = held.allocation;
    }
    memory_mutex.unlock();
  }
  return a;
}

void report_fault(int signal, siginfo_t* info, void* context) {
  const char* address = static_cast<const char*>(info->si_addr);
  const Allocation a = info->si_code == SEGV_PKUERR || (by_pages && info->si_code == SEGV_ACCERR)
                           ? allocation_of_page(address)
                           : Allocation{nullptr, 0, -1};
  if (info->si_code != SEGV_PKUERR && !a.start) {  // not ours: let the previous handler (or the default) see it
    sigaction(SIGSEGV, &previous_handler, nullptr);
    return;
  }
  char where[160] = "";
  if (a.start)
    std::snprintf(where, sizeof where, " (byte %zu of a %zu-byte allocation on device %d)", size_t(address - a.start),
                  a.bytes, a.device);
  char line[768];
  // Naming the kernel reads the ELF file: not safe in a signal handler, but the process is ending.
  const std::string kernel = current_kernel() ? "kernel " + symbol_name(current_kernel()) : "";
  if (const char* op = current_operation())
    std::snprintf(line, sizeof line,
                  "cpu: CUDA_CPU_STRICT_MEMORY: %s on device %d touched device memory at %p%s that is not its "
                  "device's\n",
                  kernel.empty() ? op : kernel.c_str(), current_operation_device(), info->si_addr, where);
  else
    std::snprintf(line, sizeof line,
                  "cpu: CUDA_CPU_STRICT_MEMORY: host code touched device memory at %p%s; the host reads device "
                  "memory only through cudaMemcpy\n",
                  info->si_addr, where);
  write_error(line);
  void* frames[24];
  backtrace_symbols_fd(frames, backtrace(frames, 24), STDERR_FILENO);
  std::abort();
}

// The device's protection key, made on first use (host threads get no access to it).
int key_of(int device) {
  if (device >= int(std::size(device_keys)))
    unsupported("CUDA_CPU_STRICT_MEMORY with more than 64 devices");
  int key = device_keys[device].load();
  if (key != 0) return key;
  std::call_once(fault_handler_installed, [] {
    struct sigaction action {};
    action.sa_sigaction = report_fault;
    action.sa_flags = SA_SIGINFO;
    sigaction(SIGSEGV, &action, &previous_handler);
  });
  if (by_pages) return 0;
  key = pkey_alloc(0, PKEY_DISABLE_ACCESS);
  if (key < 0) {
    by_pages = true;
    return 0;
  }
  device_keys[device] = key;
  return key;
}

DeviceMemory& usage_of(int device) {
  if (usage.size() <= size_t(device)) usage.resize(device + 1);
  return usage[device];
}

}  // namespace

bool find_allocation(const void* p, size_t bytes, Allocation& found) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.upper_bound(c);
  if (it == allocations.begin()) return false;
  const Allocation& a = std::prev(it)->second.allocation;
  if (c < a.start || c + bytes > a.start + a.bytes) return false;
  found = a;
  return true;
}

void* allocate_device_memory(size_t bytes, int device) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  DeviceMemory& use = usage_of(device);
  if (use.current_bytes + bytes > settings().device_bytes) return nullptr;
  void* memory;
  size_t mapped_bytes = 0;
  if (settings().strict_memory) {
    // Whole pages, since a key protects pages; the fill happens before the key takes the host's access away.
    const size_t rounded = mapped_bytes = page_rounded(bytes);
    memory = mmap(nullptr, rounded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (memory == MAP_FAILED) return nullptr;
    std::memset(memory, 0xff, rounded);
    const int key = key_of(device);
    const int status = by_pages ? mprotect(memory, rounded, pages_open[device] ? PROT_READ | PROT_WRITE : PROT_NONE)
                                : pkey_mprotect(memory, rounded, PROT_READ | PROT_WRITE, key);
    if (status != 0) {
      std::fprintf(stderr, "cpu: CUDA_CPU_STRICT_MEMORY: %s: %s\n", by_pages ? "mprotect" : "pkey_mprotect",
                   std::strerror(errno));
      std::exit(EXIT_FAILURE);
    }
  } else {
    const size_t rounded = (bytes + 255) / 256 * 256;  // cudaMalloc's alignment
    memory = std::aligned_alloc(256, rounded);
    if (!memory) return nullptr;
    std::memset(memory, 0xff, rounded);
#ifdef CPU_UNDER_ASAN
    // A kernel reading past the bytes asked for, into the rounding, is reported as a GPU's
    // compute-sanitizer would; ASan alone sees only the end of the rounded block.
    ASAN_POISON_MEMORY_REGION(static_cast<char*>(memory) + bytes, rounded - bytes);
#endif
  }
  allocations[static_cast<const char*>(memory)] = {{static_cast<const char*>(memory), bytes, device}, mapped_bytes};
  use.current_bytes += bytes;
  use.peak_bytes = std::max(use.peak_bytes, use.current_bytes);
  ++use.allocations;
  return memory;
}

bool free_device_memory(void* p) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = allocations.find(static_cast<const char*>(p));
  if (it == allocations.end()) return false;
  usage_of(it->second.allocation.device).current_bytes -= it->second.allocation.bytes;
  if (it->second.mapped_bytes) munmap(p, it->second.mapped_bytes);
  else std::free(p);
  allocations.erase(it);
  return true;
}

void set_device_memory_open(int device, bool open) {
  if (device < 0 || device >= int(std::size(pages_open))) return;  // strict memory refuses such devices
  std::lock_guard<std::mutex> lock(memory_mutex);
  pages_open[device] = open;  // also before the device's first strict allocation, which reads it
  if (!by_pages) return;
  for (const auto& [start, held] : allocations)
    if (held.mapped_bytes && held.allocation.device == device) mprotect(const_cast<char*>(start), held.mapped_bytes, open ? PROT_READ | PROT_WRITE : PROT_NONE);
}

void allow_device_access(int device) {
  if (!settings().strict_memory || by_pages) return;
  for (int d = 0; d < int(std::size(device_keys)); ++d)
    if (const int key = device_keys[d].load()) pkey_set(key, d == device ? 0 : PKEY_DISABLE_ACCESS);
}

void* allocate_pinned_memory(size_t bytes) {
  use_current_context("cudaMallocHost");  // page-locked memory is the current context's
  void* p = std::malloc(bytes ? bytes : 1);
  if (!p) return nullptr;
  std::lock_guard<std::mutex> lock(memory_mutex);
  pinned[static_cast<const char*>(p)] = bytes;
  return p;
}

bool free_pinned_memory(void* p) {
  std::lock_guard<std::mutex> lock(memory_mutex);
  if (!pinned.erase(static_cast<const char*>(p))) return false;
  std::free(p);
  return true;
}

bool is_pinned(const void* p, size_t bytes) {
  const char* c = static_cast<const char*>(p);
  std::lock_guard<std::mutex> lock(memory_mutex);
  auto it = pinned.upper_bound(c);
  return it != pinned.begin() && c + bytes <= std::prev(it)->first + std::prev(it)->second;
}

DeviceMemory device_memory() {
  std::lock_guard<std::mutex> lock(memory_mutex);
  return usage_of(current_device());
}

void reset_peak_device_memory() {
  std::lock_guard<std::mutex> lock(memory_mutex);
  DeviceMemory& use = usage_of(current_device());
  use.peak_bytes = use.current_bytes;
}

}  // namespace cpu
