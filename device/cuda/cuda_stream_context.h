#ifndef LOOM_DEVICE_CUDA_CUDA_STREAM_CONTEXT_H_
#define LOOM_DEVICE_CUDA_CUDA_STREAM_CONTEXT_H_

// CudaStreamContext: the StreamContext of one CUDA stream, on which the stream's actors only
// enqueue kernels and copies, with completion events that the stream thread polls. It also owns
// the stream's cuBLAS handle and workspace (CublasHandle), made on first use. The node's CUDA
// backend creates one per stream; kernels reach it through KernelInit::stream.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "device/cuda/cublas_library.h"
#include "device/stream_context.h"

namespace loom::cuda {

// A cuBLAS handle and the library whose functions take it.
struct CublasHandle {
  const CublasLibrary* library = nullptr;
  cublasHandle_t handle = nullptr;
};

// One stream of a CUDA device (DESIGN.md §3): a non-blocking cudaStream_t on which the stream's
// actors enqueue kernels and copies. Acts only enqueue; RecordCompletion records a CUDA event that
// the stream thread polls before telling consumers on other streams or nodes.
//
// Kernels reach it through KernelInit::stream (see kernels/cuda/cuda_kernel_util.h). Everything
// but the completion events is used by the stream's own thread only.
class CudaStreamContext final : public StreamContext {
 public:
  // cuBLAS's workspace per stream (what PyTorch gives it on Hopper).
  static constexpr int64_t kCublasWorkspaceBytes = 32 << 20;

  static absl::StatusOr<std::unique_ptr<CudaStreamContext>> Create(int device);
  ~CudaStreamContext() override;

  CudaStreamContext(const CudaStreamContext&) = delete;
  CudaStreamContext& operator=(const CudaStreamContext&) = delete;

  bool is_asynchronous() const override { return true; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override;
  void BindToThread() override;
  // cudaMemcpyAsync with cudaMemcpyDefault: host (pinned or not), this GPU or another.
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override;
  // A kernel on this stream (device/cuda/add_float32.cu).
  absl::Status AddFloat32(float* sum, const float* values, int64_t count) override;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // A cuBLAS handle on this stream with its own workspace, made on first use (which loads cuBLAS:
  // see CublasLibrary).
  absl::StatusOr<CublasHandle> Cublas();
  absl::Status Synchronize() override;

 private:
  class Event;
  CudaStreamContext(int device, cudaStream_t stream) : device_(device), stream_(stream) {}
  void ReturnEvent(cudaEvent_t event);

  const int device_;
  const cudaStream_t stream_;
  std::unique_ptr<CublasLibrary> cublas_library_;
  cublasHandle_t cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  // Recorded events come back here once their consumers were told; completion may be polled
  // from another thread than the one that records, hence the lock.
  std::mutex events_mutex_;
  std::vector<cudaEvent_t> free_events_;
};

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_CUDA_STREAM_CONTEXT_H_
