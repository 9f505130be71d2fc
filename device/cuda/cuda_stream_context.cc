#include "device/cuda/cuda_stream_context.h"

#include "absl/strings/str_cat.h"
#include "device/cuda/add_float32.h"
#include "device/cuda/cuda_status.h"
#include "glog/logging.h"

namespace loom::cuda {

// A recorded event; it goes back to its stream's pool when the runtime is done with it.
class CudaStreamContext::Event final : public CompletionEvent {
 public:
  Event(CudaStreamContext* owner, cudaEvent_t event) : owner_(owner), event_(event) {}
  ~Event() override { owner_->ReturnEvent(event_); }

  absl::StatusOr<bool> IsComplete() override {
    cudaError_t error = cudaEventQuery(event_);
    if (error == cudaErrorNotReady) return false;
    if (error != cudaSuccess) {
      return CudaStatus(
          error, absl::StrCat("the work before a completion event on cuda:", owner_->device()));
    }
    return true;
  }

 private:
  CudaStreamContext* owner_;
  cudaEvent_t event_;
};

absl::StatusOr<std::unique_ptr<CudaStreamContext>> CudaStreamContext::Create(int device) {
  std::string where = absl::StrCat("cuda:", device);
  if (absl::Status status = CudaStatus(cudaSetDevice(device), absl::StrCat("selecting ", where));
      !status.ok()) {
    return status;
  }
  cudaStream_t stream = nullptr;
  if (absl::Status status = CudaStatus(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                                       absl::StrCat("creating a stream on ", where));
      !status.ok()) {
    return status;
  }
  return std::unique_ptr<CudaStreamContext>(new CudaStreamContext(device, stream));
}

CudaStreamContext::~CudaStreamContext() {
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  if (cublas_ != nullptr) cublas_library_->destroy(cublas_);
  if (cublas_workspace_ != nullptr) cudaFree(cublas_workspace_);
  for (cudaEvent_t event : free_events_) cudaEventDestroy(event);
  cudaStreamDestroy(stream_);
}

void CudaStreamContext::BindToThread() {
  cudaError_t error = cudaSetDevice(device_);
  if (error != cudaSuccess) {
    LOG(ERROR) << "cuda:" << device_
               << ": cannot bind the stream thread: " << cudaGetErrorString(error);
  }
}

std::unique_ptr<CompletionEvent> CudaStreamContext::RecordCompletion() {
  cudaEvent_t event = nullptr;
  {
    std::lock_guard<std::mutex> lock(events_mutex_);
    if (!free_events_.empty()) {
      event = free_events_.back();
      free_events_.pop_back();
    }
  }
  if (event == nullptr) {
    cudaError_t error = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    // Without an event the stream cannot tell when its work is done: wait for it here instead.
    if (error != cudaSuccess) {
      LOG(ERROR) << "cuda:" << device_ << ": cudaEventCreate: " << cudaGetErrorString(error);
      cudaStreamSynchronize(stream_);
      return nullptr;
    }
  }
  cudaEventRecord(event, stream_);
  return std::make_unique<Event>(this, event);
}

void CudaStreamContext::ReturnEvent(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(events_mutex_);
  free_events_.push_back(event);
}

absl::Status CudaStreamContext::Copy(void* destination, const void* source, int64_t bytes) {
  if (bytes <= 0) return absl::OkStatus();
  return CudaStatus(
      cudaMemcpyAsync(destination, source, static_cast<size_t>(bytes), cudaMemcpyDefault, stream_),
      absl::StrCat("copying ", bytes, " bytes on a stream of cuda:", device_));
}

absl::Status CudaStreamContext::AddFloat32(float* sum, const float* values, int64_t count) {
  if (count <= 0) return absl::OkStatus();
  return CudaStatus(LaunchAddFloat32(sum, values, count, stream_),
                    absl::StrCat("adding ", count, " floats on a stream of cuda:", device_));
}

absl::StatusOr<CublasHandle> CudaStreamContext::Cublas() {
  if (cublas_ != nullptr) return CublasHandle{cublas_library_.get(), cublas_};
  std::string where = absl::StrCat("cuBLAS on cuda:", device_);
  if (cublas_library_ == nullptr) {
    absl::StatusOr<std::unique_ptr<CublasLibrary>> library = CublasLibrary::Load();
    if (!library.ok()) {
      return absl::Status(library.status().code(),
                          absl::StrCat(where, ": ", library.status().message()));
    }
    cublas_library_ = *std::move(library);
  }
  const CublasLibrary& library = *cublas_library_;
  cublasHandle_t handle = nullptr;
  if (absl::Status status = library.Status(library.create(&handle), where); !status.ok()) {
    return status;
  }
  absl::Status status = library.Status(library.set_stream(handle, stream_), where);
  if (status.ok()) {
    status = CudaStatus(cudaMalloc(&cublas_workspace_, kCublasWorkspaceBytes),
                        absl::StrCat("allocating the workspace of ", where));
  }
  if (status.ok()) {
    status = library.Status(library.set_workspace(handle, cublas_workspace_, kCublasWorkspaceBytes),
                            where);
  }
  if (!status.ok()) {
    library.destroy(handle);
    return status;
  }
  cublas_ = handle;
  return CublasHandle{cublas_library_.get(), cublas_};
}

absl::Status CudaStreamContext::Synchronize() {
  return CudaStatus(cudaStreamSynchronize(stream_),
                    absl::StrCat("waiting for a stream of cuda:", device_));
}

}  // namespace loom::cuda
