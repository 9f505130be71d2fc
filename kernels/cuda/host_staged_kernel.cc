#include "kernels/cuda/host_staged_kernel.h"

#include <cuda_runtime_api.h>

#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "device/cuda/scoped_device.h"
#include "kernels/cpu/data/safetensors_slice_kernel.h"
#include "kernels/cpu/data/token_batch_kernel.h"
#include "kernels/cuda/cuda_kernel_util.h"

namespace loom::cuda {
namespace {

class HostStagedKernel final : public Kernel {
 public:
  HostStagedKernel(std::string task_name, std::unique_ptr<Kernel> host, CudaStreamContext* stream)
      : task_name_(std::move(task_name)), host_(std::move(host)), stream_(stream) {}

  ~HostStagedKernel() override {
    ScopedDevice device(stream_->device());
    if (copied_ != nullptr) {
      cudaEventSynchronize(copied_);
      cudaEventDestroy(copied_);
    }
    for (void* buffer : staging_) cudaFreeHost(buffer);
  }

  // Allocates a pinned buffer for every output and the event marking their copies.
  absl::Status Allocate(const std::vector<plan::TensorDesc>& outputs) {
    ScopedDevice device(stream_->device());
    if (absl::Status status = CudaStatus(device.error(), Where("selecting its GPU"));
        !status.ok()) {
      return status;
    }
    for (const plan::TensorDesc& output : outputs) {
      const TensorView view{nullptr, output.data_type(), Shape::FromProto(output)};
      void* buffer = nullptr;
      const size_t bytes = static_cast<size_t>(std::max<int64_t>(view.ByteSize(), 1));
      if (absl::Status status = CudaStatus(cudaHostAlloc(&buffer, bytes, cudaHostAllocDefault),
                                           Where(absl::StrCat("pinning ", bytes, " bytes")));
          !status.ok()) {
        return status;
      }
      staging_.push_back(buffer);
    }
    return CudaStatus(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming),
                      Where("creating its copy event"));
  }

  absl::Status Compute(const KernelContext& context) override {
    if (pending_) {
      // The previous act's copies read the staging buffers: they must be done first.
      pending_ = false;
      if (absl::Status status =
              CudaStatus(cudaEventSynchronize(copied_), Where("waiting for its last copy"));
          !status.ok()) {
        return status;
      }
    }
    std::vector<TensorView> staged;
    for (size_t i = 0; i < context.outputs.size(); ++i) {
      staged.push_back(
          TensorView{staging_[i], context.outputs[i].data_type, context.outputs[i].shape});
    }
    KernelContext host_context = context;
    host_context.outputs = staged;
    if (absl::Status status = host_->Compute(host_context); !status.ok()) return status;
    for (size_t i = 0; i < context.outputs.size(); ++i) {
      const int64_t bytes = context.outputs[i].ByteSize();
      if (bytes == 0) continue;
      if (absl::Status status = CudaStatus(
              cudaMemcpyAsync(context.outputs[i].data, staging_[i], static_cast<size_t>(bytes),
                              cudaMemcpyHostToDevice, stream_->stream()),
              Where("copying its output to the GPU"));
          !status.ok()) {
        return status;
      }
    }
    if (absl::Status status =
            CudaStatus(cudaEventRecord(copied_, stream_->stream()), Where("recording its copy"));
        !status.ok()) {
      return status;
    }
    pending_ = true;
    return absl::OkStatus();
  }

 private:
  std::string Where(absl::string_view what) const {
    return absl::StrCat("task '", task_name_, "': ", what);
  }

  const std::string task_name_;
  const std::unique_ptr<Kernel> host_;
  CudaStreamContext* const stream_;
  std::vector<void*> staging_;
  cudaEvent_t copied_ = nullptr;
  bool pending_ = false;
};

absl::StatusOr<std::unique_ptr<Kernel>> CreateHostStaged(
    absl::StatusOr<std::unique_ptr<Kernel>> (*host_factory)(const KernelInit&),
    const KernelInit& init) {
  absl::StatusOr<CudaStreamContext*> stream = StreamOf(init);
  if (!stream.ok()) return stream.status();
  if (!init.inputs.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("task '", init.task_name, "': ", init.conf->op_type(),
                     " on a GPU takes no inputs, not ", init.inputs.size()));
  }
  absl::StatusOr<std::unique_ptr<Kernel>> host = host_factory(init);
  if (!host.ok()) return host.status();
  auto kernel = std::make_unique<HostStagedKernel>(init.task_name, *std::move(host), *stream);
  if (absl::Status status = kernel->Allocate(init.outputs); !status.ok()) return status;
  return kernel;
}

}  // namespace

absl::Status RegisterCudaHostStagedKernels(KernelRegistry* registry) {
  if (absl::Status status = registry->Register("safetensors_slice", plan::CUDA,
                                               [](const KernelInit& init) {
                                                 return CreateHostStaged(
                                                     cpu::CreateSafetensorsSliceKernel, init);
                                               });
      !status.ok()) {
    return status;
  }
  return registry->Register("token_batch", plan::CUDA, [](const KernelInit& init) {
    return CreateHostStaged(cpu::CreateTokenBatchKernel, init);
  });
}

}  // namespace loom::cuda
