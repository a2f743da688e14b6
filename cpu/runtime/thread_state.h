// What the calling thread is to the CPU build's runtime: the device it selected (cudaSetDevice),
// and the stream operation it runs when it is one of cpu/'s workers. Thread-local state only,
// including nothing of cpu/, so that the devices, the memory and the streams can all read it
// without including one another in a circle.
#pragma once

namespace cpu {

// The calling thread's selected device (0 until it selects one). Not a use of its context: see
// current_device (cpu/runtime/devices.h).
int selected_device();
void select_device(int device);

// The operation a thread runs: nothing on a host thread.
struct OperationOnThread {
  const char* name = nullptr;
  int device = -1;
  const void* kernel = nullptr;  // a kernel's blocks: the kernel, named when reported
};
// Makes op the calling thread's operation; returns the one it replaces (RunningOperation,
// cpu/runtime/streams.h, restores it).
OperationOnThread set_operation_on_thread(const OperationOnThread& op);
// What the calling thread runs (nullptr on a host thread), for which device, which kernel if any.
const char* current_operation();
int current_operation_device();
const void* current_kernel();

}  // namespace cpu
