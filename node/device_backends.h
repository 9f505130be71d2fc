#ifndef LOOM_NODE_DEVICE_BACKENDS_H_
#define LOOM_NODE_DEVICE_BACKENDS_H_

// Which device backends a process runs with: whether this build has CUDA (HasCudaBackend), how
// many GPUs it sees and how much memory each has free, the kernels of every device type it has
// (RegisterAllKernels), and the set-up of a job's options for the devices its plan uses
// (SetUpDevices). loomd's nodes, `loomctl run` and `loomctl run-plan` call these.

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/gpu_memory_budget.h"
#include "kernels/kernel_registry.h"
#include "proto/plan.pb.h"
#include "runtime/job_options.h"

namespace loom {

// Whether this build has the CUDA backend (it does when the CUDA toolkit was found).
bool HasCudaBackend();

// How many GPUs this process sees. FAILED_PRECONDITION when this build has no CUDA backend or
// this machine no usable GPU (with CUDA's reason).
absl::StatusOr<int> CudaDeviceCount();

// The free and total memory of GPU `device` (cudaMemGetInfo); FAILED_PRECONDITION as
// CudaDeviceCount when there is no CUDA backend.
absl::StatusOr<GpuMemory> CudaDeviceMemory(int device);

// Registers the kernels of every device type this build has: CPU, and CUDA when built with it.
absl::Status RegisterAllKernels(KernelRegistry* registry);

// Sets `options` up for the device types `plan` uses: nothing for a CPU-only plan; the CUDA
// backend (GPU streams and memory, pinned host memory) for a plan with CUDA devices.
// FAILED_PRECONDITION when the plan has CUDA devices and this build has no CUDA backend or this
// machine no usable GPU (with CUDA's reason).
absl::Status SetUpDevices(const plan::Plan& plan, JobOptions* options);

}  // namespace loom

#endif  // LOOM_NODE_DEVICE_BACKENDS_H_
