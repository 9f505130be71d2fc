#ifndef LOOM_RUNTIME_CUDA_CUDA_BACKEND_H_
#define LOOM_RUNTIME_CUDA_CUDA_BACKEND_H_

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

#endif  // LOOM_RUNTIME_CUDA_CUDA_BACKEND_H_
