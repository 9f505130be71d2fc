#include "device/cuda/cublas_library.h"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "absl/strings/str_cat.h"

namespace loom::cuda {
namespace {

// Set by the build (device/cuda/CMakeLists.txt): "libcublas.so.<toolkit major version>" and the
// toolkit's library directory.
constexpr const char* kSoname = LOOM_CUBLAS_SONAME;
constexpr const char* kBuildDirectory = LOOM_CUBLAS_DIRECTORY;

// GemmStridedBatched is the type of the exported overload: the static_cast picks it, and fails to
// compile if none has that type (an unevaluated use: nothing links cuBLAS).
static_assert(std::is_same_v<
              decltype(static_cast<CublasLibrary::GemmStridedBatched>(&cublasGemmStridedBatchedEx)),
              CublasLibrary::GemmStridedBatched>);

}  // namespace

absl::StatusOr<std::unique_ptr<CublasLibrary>> CublasLibrary::Load() {
  constexpr int kFlags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
  void* handle = dlopen(kSoname, kFlags);
  std::string reasons;
  if (handle == nullptr) {
    reasons = dlerror();
    const std::string path = absl::StrCat(kBuildDirectory, "/", kSoname);
    handle = dlopen(path.c_str(), kFlags);
    if (handle == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot load cuBLAS: ", reasons, "; ", dlerror(),
                       " (put the CUDA toolkit's library directory on LD_LIBRARY_PATH)"));
    }
  }
  std::unique_ptr<CublasLibrary> library(new CublasLibrary());
  absl::Status missing;
  auto resolve = [&](auto& function, const char* name) {
    function = reinterpret_cast<std::remove_reference_t<decltype(function)>>(dlsym(handle, name));
    if (function == nullptr && missing.ok()) {
      missing = absl::FailedPreconditionError(
          absl::StrCat("the cuBLAS loaded (", kSoname, ") has no function ", name));
    }
  };
  resolve(library->create, "cublasCreate_v2");
  resolve(library->destroy, "cublasDestroy_v2");
  resolve(library->set_stream, "cublasSetStream_v2");
  resolve(library->set_workspace, "cublasSetWorkspace_v2");
  resolve(library->gemm_strided_batched, "cublasGemmStridedBatchedEx");
  resolve(library->status_name_, "cublasGetStatusName");
  resolve(library->status_string_, "cublasGetStatusString");
  if (!missing.ok()) return missing;
  return library;
}

absl::Status CublasLibrary::Status(cublasStatus_t status, absl::string_view what) const {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  std::string message =
      absl::StrCat(what, ": cuBLAS ", status_name_(status), " (", status_string_(status), ")");
  if (status == CUBLAS_STATUS_ALLOC_FAILED) return absl::ResourceExhaustedError(message);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_INVALID_VALUE) {
    return absl::InvalidArgumentError(message);
  }
  return absl::InternalError(message);
}

}  // namespace loom::cuda
