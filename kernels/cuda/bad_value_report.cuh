#ifndef LOOM_KERNELS_CUDA_BAD_VALUE_REPORT_CUH_
#define LOOM_KERNELS_CUDA_BAD_VALUE_REPORT_CUH_

// Device code only (include from .cu files): how the CUDA kernels that index with labels or ids
// report a bad one to the host without waiting for the GPU.

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_status.h"

namespace loom::cuda {

// No bad position found (yet).
inline constexpr unsigned long long kNoPosition = ~0ull;

// What the device reports: the act's smallest bad position (reset by each act's capture), and the
// first bad position of any act with its value, kept until the host reports it.
struct DeviceReport {
  unsigned long long act;
  unsigned long long first;
  long long value;
};

// After an act: keeps its bad position, if any and none is kept yet, with the value there.
template <typename Index>
__global__ void CaptureBadValueKernel(const Index* __restrict__ values, DeviceReport* report) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  const unsigned long long act = report->act;
  if (act == kNoPosition) return;
  if (report->first == kNoPosition) {
    report->first = act;
    report->value = static_cast<long long>(values[act]);
  }
  report->act = kNoPosition;
}

// A bad label or id found on the GPU, reported by a later act: the kernels record the act's
// smallest bad position, a capture kernel keeps the first with its value, each act copies that to
// a pinned host mirror, and Compute reads the mirror once the copy of an earlier act has landed
// (an event says so).
class BadValueReport {
 public:
  BadValueReport() = default;
  BadValueReport(const BadValueReport&) = delete;
  BadValueReport& operator=(const BadValueReport&) = delete;
  ~BadValueReport() {
    if (event_ != nullptr) cudaEventDestroy(event_);
    if (host_ != nullptr) cudaFreeHost(host_);
    if (device_ != nullptr) cudaFree(device_);
  }

  absl::Status Allocate(cudaStream_t stream, const std::string& what) {
    if (absl::Status status = CudaStatus(cudaMalloc(&device_, sizeof(DeviceReport)), what);
        !status.ok()) {
      device_ = nullptr;
      return status;
    }
    if (absl::Status status =
            CudaStatus(cudaHostAlloc(&host_, sizeof(DeviceReport), cudaHostAllocDefault), what);
        !status.ok()) {
      host_ = nullptr;
      return status;
    }
    Clear(host_);
    if (absl::Status status =
            CudaStatus(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), what);
        !status.ok()) {
      event_ = nullptr;
      return status;
    }
    // Ordered before every act on the stream.
    return CudaStatus(cudaMemsetAsync(device_, 0xff, sizeof(DeviceReport), stream), what);
  }

  unsigned long long* act() const { return &device_->act; }

  // OK when no earlier act found a bad value (or its copy has not landed yet). Otherwise calls
  // `describe`(position, value) for the CPU's message, clears the report (host and device), and
  // returns INVALID_ARGUMENT naming the task.
  template <typename Describe>
  absl::Status Check(const std::string& task_name, cudaStream_t stream, Describe describe) {
    const cudaError_t ready = cudaEventQuery(event_);
    if (ready == cudaErrorNotReady) {
      // Not an error: the report comes with a later act. Clear it from the thread's last error.
      (void)cudaGetLastError();
      return absl::OkStatus();
    }
    const std::string what = absl::StrCat("task '", task_name, "'");
    if (ready != cudaSuccess) return CudaStatus(ready, what);
    const volatile DeviceReport* mirror = host_;
    const unsigned long long first = mirror->first;
    if (first == kNoPosition) return absl::OkStatus();
    const int64_t value = static_cast<int64_t>(mirror->value);
    const absl::Status found = describe(static_cast<int64_t>(first), value);
    Clear(host_);
    if (absl::Status status =
            CudaStatus(cudaMemsetAsync(device_, 0xff, sizeof(DeviceReport), stream), what);
        !status.ok()) {
      return status;
    }
    return absl::InvalidArgumentError(absl::StrCat("task '", task_name, "': ", found.message(),
                                                   " (found on the GPU by an earlier act)"));
  }

  // After an act's kernels: keeps the act's bad value and brings the report to the host mirror.
  template <typename Index>
  absl::Status Publish(const Index* values, cudaStream_t stream, const std::string& what) {
    CaptureBadValueKernel<Index><<<1, 32, 0, stream>>>(values, device_);
    if (absl::Status status = LaunchStatus(what); !status.ok()) return status;
    if (absl::Status status = CudaStatus(
            cudaMemcpyAsync(host_, device_, sizeof(DeviceReport), cudaMemcpyDeviceToHost, stream),
            what);
        !status.ok()) {
      return status;
    }
    return CudaStatus(cudaEventRecord(event_, stream), what);
  }

 private:
  static void Clear(DeviceReport* report) {
    volatile DeviceReport* mirror = report;
    mirror->act = kNoPosition;
    mirror->first = kNoPosition;
    mirror->value = 0;
  }

  DeviceReport* device_ = nullptr;
  DeviceReport* host_ = nullptr;
  cudaEvent_t event_ = nullptr;
};

}  // namespace loom::cuda

#endif  // LOOM_KERNELS_CUDA_BAD_VALUE_REPORT_CUH_
