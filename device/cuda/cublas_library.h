#ifndef LOOM_DEVICE_CUDA_CUBLAS_LIBRARY_H_
#define LOOM_DEVICE_CUDA_CUBLAS_LIBRARY_H_

// CublasLibrary: libcublas loaded with dlopen when a CUDA stream first needs a cuBLAS handle, not
// when the program starts, with the cuBLAS functions Loom calls (handles, stream, workspace,
// cublasGemmStridedBatchedEx) and the mapping of cuBLAS statuses to absl::Status.
// CudaStreamContext loads one on first use (CudaStreamContext::Cublas).

#include <cublas_v2.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::cuda {

// The cuBLAS functions Loom calls, from libcublas loaded when a CUDA stream first needs a handle
// instead of when the program starts: loading libcublas (and the libcublasLt it needs) costs a
// process about 150 MB of resident memory and 90 ms, which a loomd, loomctl or test that never
// runs a GEMM on a GPU has no use for. The library stays loaded until the process exits (it is
// never unloaded under the CUDA runtime that uses it).
class CublasLibrary {
 public:
  // Loads libcublas by its soname (LD_LIBRARY_PATH and the program's run path, as the dynamic
  // linker searches), else from the toolkit's directory at build time. FAILED_PRECONDITION naming
  // the file and the loader's reason when neither works or a function is missing.
  static absl::StatusOr<std::unique_ptr<CublasLibrary>> Load();

  // OK for CUBLAS_STATUS_SUCCESS; otherwise an error saying what was being done and cuBLAS's own
  // words: RESOURCE_EXHAUSTED when it ran out of memory, INVALID_ARGUMENT for an unsupported or
  // invalid call, INTERNAL otherwise.
  absl::Status Status(cublasStatus_t status, absl::string_view what) const;

  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // The exported cublasGemmStridedBatchedEx (cublas_api.h adds an inline overload that takes
  // the compute type as a cudaDataType).
  using GemmStridedBatched = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t,
                                                cublasOperation_t, int, int, int, const void*,
                                                const void*, cudaDataType, int, long long,
                                                const void*, cudaDataType, int, long long,
                                                const void*, void*, cudaDataType, int, long long,
                                                int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmStridedBatched gemm_strided_batched = nullptr;

 private:
  CublasLibrary() = default;

  decltype(&cublasGetStatusName) status_name_ = nullptr;
  decltype(&cublasGetStatusString) status_string_ = nullptr;
};

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_CUBLAS_LIBRARY_H_
