#ifndef LOOM_DEVICE_CUDA_SCOPED_DEVICE_H_
#define LOOM_DEVICE_CUDA_SCOPED_DEVICE_H_

// ScopedDevice: makes a GPU the calling thread's current device for a scope and restores the
// previous one after, for CUDA work done off a stream's own thread (building kernels, freeing their
// memory). Several CUDA kernel files (attention, element-wise arithmetic, gradient, optimizer,
// host-staged) use it.

#include <cuda_runtime_api.h>

namespace loom::cuda {

// Makes `device` the calling thread's current GPU for the scope (for work done off the stream's
// own thread: building kernels, freeing their memory), and restores the previous one after.
class ScopedDevice {
 public:
  explicit ScopedDevice(int device) : device_(device) {
    if (cudaGetDevice(&previous_) != cudaSuccess) previous_ = -1;
    error_ = previous_ == device ? cudaSuccess : cudaSetDevice(device);
    // The failure is reported by error(); left as the thread's last error, it would be taken for
    // the failure of the thread's next kernel launch.
    if (error_ != cudaSuccess) cudaGetLastError();
  }
  ~ScopedDevice() {
    if (previous_ >= 0 && previous_ != device_) cudaSetDevice(previous_);
  }
  ScopedDevice(const ScopedDevice&) = delete;
  ScopedDevice& operator=(const ScopedDevice&) = delete;

  // What selecting the device returned.
  cudaError_t error() const { return error_; }

 private:
  const int device_;
  int previous_ = -1;
  cudaError_t error_ = cudaSuccess;
};

}  // namespace loom::cuda

#endif  // LOOM_DEVICE_CUDA_SCOPED_DEVICE_H_
