#ifndef LOOM_NODE_CUDA_BACKEND_H_
#define LOOM_NODE_CUDA_BACKEND_H_

// The CUDA backend's set-up of a job (UseCuda): CUDA streams and caching device memory for the
// GPUs, pinned host memory for the CPU devices, and NCCL for communicators among this process's
// GPUs. Compiled only when the CUDA toolkit is found (node/CMakeLists.txt); SetUpDevices
// (node/device_backends.h) calls it for a plan with CUDA devices.

#include "absl/status/status.h"
#include "runtime/job_options.h"

namespace loom::cuda {

// Sets a job up to run on GPUs: every stream of a CUDA device gets a CudaStreamContext (its own
// non-blocking cudaStream_t: compute, copy and communication streams alike), every CUDA device a
// CachingCudaMemoryResource, and every CPU device pinned host memory and a synchronous stream
// whose copies may cross to a GPU; communicators whose ranks are GPUs of this process get NCCL
// (NcclCollectives, with options->collective_timeout as set before the call). FAILED_PRECONDITION
// (with CUDA's reason) when no GPU is usable.
absl::Status UseCuda(JobOptions* options);

}  // namespace loom::cuda

#endif  // LOOM_NODE_CUDA_BACKEND_H_
