// The calling thread's device and operation (cpu/runtime/thread_state.h).
#include "cpu/runtime/thread_state.h"

namespace cpu {
namespace {

thread_local int this_thread_device = 0;
thread_local OperationOnThread this_thread_operation;

}  // namespace

int selected_device() { return this_thread_device; }
void select_device(int device) { this_thread_device = device; }

OperationOnThread set_operation_on_thread(const OperationOnThread& op) {
  const OperationOnThread replaced = this_thread_operation;
  this_thread_operation = op;
  return replaced;
}
const char* current_operation() { return this_thread_operation.name; }
int current_operation_device() { return this_thread_operation.device; }
const void* current_kernel() { return this_thread_operation.kernel; }

}  // namespace cpu
