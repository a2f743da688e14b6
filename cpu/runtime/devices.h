// The devices of the CPU build as a process sees them, and which of them it uses.
//
// Visible devices. A node has CUDA_CPU_DEVICES physical devices; CUDA_VISIBLE_DEVICES, read as
// CUDA reads it, says which of them the process sees and in what order: device d of the CUDA
// API (cudaSetDevice, cudaGetDeviceCount) is physical device physical_device(d). Launchers that
// give each rank one GPU (Slurm's --gpus-per-task=1, site wrappers) set it per rank, so that
// every rank sees its own GPU as device 0; the physical device, and the UUID derived from it and
// the host name, is what says whether two processes share a GPU.
//
// Device contexts. A host thread that makes a runtime call without cudaSetDevice uses device 0,
// and the runtime creates its context there (CUDA Programming Guide, "Initialization"): a
// thread of a rank that forgets to select the rank's device opens a context on GPU 0 (hundreds
// of MiB per rank; refused in exclusive-process mode). So every call that needs the calling
// thread's device (allocations, streams and events, their queries and synchronisations, work
// queued on a stream, memory queries, communicator creation) records that device for the
// process, and a process that uses more devices than CUDA_CPU_DEVICES_PER_PROCESS (default 1:
// one rank, one device) is reported in one line naming the call and both devices, and aborts.
// The CPU build's own threads (stream workers, a kernel's blocks) are the device's and are not
// recorded. Device queries (cudaGetDeviceCount, cudaGetDeviceProperties), cudaSetDevice and
// error queries need no context.
#pragma once
#include <array>
#include <optional>
#include <string>
#include <vector>

namespace cpu {

// CUDA_VISIBLE_DEVICES's text (nullopt: unset) on a node of `physical_devices`: the physical
// indices it makes visible, in order. As CUDA reads it: comma-separated indices, each up to its
// first character that is not a digit (so "1gpu" is 1); an entry that is not an index, or not
// one of the node's devices, ends the list; a repeated index leaves no device visible; "" hides
// every device. GPU UUIDs ("GPU-...", "MIG-...") are not supported and abort.
std::vector<int> parse_visible_devices(const std::optional<std::string>& text, int physical_devices);

// Devices this process sees (cudaGetDeviceCount), and the physical device behind one of them.
int visible_device_count();
int physical_device(int device);
// cudaDeviceProp::uuid of visible device `device`: 16 bytes from its physical index and the host
// name, so that two devices of a node differ and so do two nodes' devices of one index.
std::array<char, 16> device_uuid(int device);

// The calling thread's call uses the context of `device`, its current device (see above).
// `what` names the call when no CUDA, cuBLAS or NCCL function is on the stack (a kernel launch).
void use_context(int device, const char* what);
// The calling host thread's current device (cudaSetDevice; 0 until set), for a call that uses its
// context: the use is recorded for the process (one process, one device).
int current_device();
// The calling thread's call `what` uses its current device's context, as current_device() says.
void use_current_context(const char* what);
void set_current_device(int device);

// For tests: the devices this process has used a context on, in the order of first use; and
// forgetting them (a test that has used several, with CUDA_CPU_DEVICES_PER_PROCESS raised).
std::vector<int> devices_used();
void forget_devices_used();

}  // namespace cpu
