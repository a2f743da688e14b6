// The running NCCL operations of each device, and the serial mode's gate (cpu/nccl/nccl_device.h).
#include "cpu/nccl/nccl_device.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>

#include "cpu/runtime/settings.h"

namespace cpu {
namespace {

struct NcclDevice {
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<uint64_t> waiting;            // serial mode: tickets at the gate, in arrival order
  uint64_t tickets = 0;
  std::map<const void*, int> running;      // per communicator: operations begun and not ended
  int running_total = 0;                   // operations begun and not ended
  uint64_t begun = 0;
};

NcclDevice& device_state(int device) {
  static std::mutex mutex;
  static std::map<int, NcclDevice>& devices = *new std::map<int, NcclDevice>;  // never freed: workers may outlive exit
  std::lock_guard<std::mutex> lock(mutex);
  return devices[device];
}

}  // namespace

bool begin_nccl_operation(int device, const std::vector<const void*>& comms, const std::function<bool()>& give_up) {
  NcclDevice& d = device_state(device);
  std::unique_lock<std::mutex> lock(d.mutex);
  if (settings().nccl_serial) {
    const uint64_t ticket = ++d.tickets;
    d.waiting.push_back(ticket);
    for (;;) {
      if (d.running_total == 0 && d.waiting.front() == ticket) break;
      if (give_up()) {
        std::erase(d.waiting, ticket);
        d.changed.notify_all();
        return false;
      }
      d.changed.wait_for(lock, std::chrono::milliseconds(1));
    }
    d.waiting.pop_front();
  }
  for (const void* comm : comms) d.running[comm] += 1;
  d.running_total += 1;
  d.begun += 1;
  return true;
}

void end_nccl_operation(int device, const std::vector<const void*>& comms) {
  NcclDevice& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  for (const void* comm : comms) d.running[comm] -= 1;
  d.running_total -= 1;
  d.changed.notify_all();
}

void wake_nccl_waiters(int device) {
  NcclDevice& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  d.changed.notify_all();
}

void wait_for_other_communicators(int device, const void* comm) {
  NcclDevice& d = device_state(device);
  std::unique_lock<std::mutex> lock(d.mutex);
  d.changed.wait(lock, [&] {
    for (const auto& [other, operations] : d.running)
      if (other != comm && operations > 0) return false;
    return true;
  });
}

uint64_t nccl_operations_begun(int device) {
  NcclDevice& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mutex);
  return d.begun;
}

}  // namespace cpu
