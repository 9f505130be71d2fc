#include "device/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>

#include "absl/strings/str_cat.h"
#include "core/format_bytes.h"
#include "device/cuda/cuda_status.h"

namespace loom::cuda {

absl::StatusOr<int> DeviceCount() {
  int count = 0;
  cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // Not sticky: clear it.
    return absl::FailedPreconditionError(absl::StrCat(
        "no usable CUDA device: ", cudaGetErrorName(error), " (", cudaGetErrorString(error), ")"));
  }
  if (count == 0) return absl::FailedPreconditionError("no usable CUDA device: none found");
  return count;
}

absl::StatusOr<std::string> DeviceDescription(int device) {
  cudaDeviceProp properties;
  if (absl::Status status = CudaStatus(cudaGetDeviceProperties(&properties, device),
                                       absl::StrCat("reading the properties of cuda:", device));
      !status.ok()) {
    return status;
  }
  return absl::StrCat(properties.name, " (sm_", properties.major, properties.minor, ", ",
                      FormatBytes(static_cast<int64_t>(properties.totalGlobalMem)), ")");
}

absl::StatusOr<GpuMemory> DeviceMemory(int device) {
  if (absl::Status status =
          CudaStatus(cudaSetDevice(device), absl::StrCat("selecting cuda:", device));
      !status.ok()) {
    return status;
  }
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  if (absl::Status status = CudaStatus(cudaMemGetInfo(&free_bytes, &total_bytes),
                                       absl::StrCat("reading the memory of cuda:", device));
      !status.ok()) {
    return status;
  }
  return GpuMemory{static_cast<int64_t>(free_bytes), static_cast<int64_t>(total_bytes)};
}

}  // namespace loom::cuda
