#ifndef LOOM_DEVICE_CUDA_CUDA_DEVICES_H_
#define LOOM_DEVICE_CUDA_CUDA_DEVICES_H_

// The GPUs this process sees: DeviceCount (FAILED_PRECONDITION with CUDA's reason when there is no
// driver or device), DeviceDescription (name, compute capability and memory) and DeviceMemory
// (free and total bytes). The node's device backends, the CUDA tests and the GPU benchmarks use
// them.

#include <string>

#include "absl/status/statusor.h"
#include "device/gpu_memory_budget.h"

namespace loom::cuda {

// How many GPUs this process sees. FAILED_PRECONDITION with CUDA's reason when there is no
// driver or no device (so callers and tests can say why they skip).
absl::StatusOr<int> DeviceCount();

// "NVIDIA H100 80GB HBM3 (sm_90, 79.2 GiB)" for `device`.
absl::StatusOr<std::string> DeviceDescription(int device);

// The free and total memory of `device` now (cudaMemGetInfo; makes `device` this thread's
// current device, creating its context when there is none yet).
absl::StatusOr<GpuMemory> DeviceMemory(int device);

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_CUDA_DEVICES_H_
