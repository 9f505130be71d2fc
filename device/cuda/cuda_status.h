#ifndef LOOM_DEVICE_CUDA_CUDA_STATUS_H_
#define LOOM_DEVICE_CUDA_CUDA_STATUS_H_

// CUDA runtime errors as absl::Status: CudaStatus for a cudaError_t and LaunchStatus for the last
// kernel launch on this thread, each naming what was being done and mapping out-of-memory and a
// missing device or driver to their own codes. Every CUDA file of device/, kernels/ and the NCCL
// collectives reports errors through them.

#include <cuda_runtime_api.h>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace loom::cuda {

// OK for cudaSuccess; otherwise an error saying what was being done and CUDA's own words.
// Out-of-memory maps to RESOURCE_EXHAUSTED, a missing device or driver to FAILED_PRECONDITION,
// everything else to INTERNAL.
absl::Status CudaStatus(cudaError_t error, absl::string_view what);

// The error of the last kernel launch on this thread (cudaGetLastError), as above.
absl::Status LaunchStatus(absl::string_view what);

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_CUDA_STATUS_H_
