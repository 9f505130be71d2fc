#include "node/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <memory>

#include "absl/strings/str_cat.h"
#include "device/cuda/cuda_devices.h"
#include "device/cuda/cuda_memory_resource.h"
#include "device/cuda/cuda_status.h"
#include "device/cuda/cuda_stream_context.h"
#include "glog/logging.h"
#include "runtime/collectives/nccl_collectives.h"

namespace loom::cuda {
namespace {

// A CPU stream in a job with GPUs: synchronous, and its copies may read or write GPU memory.
class HostStreamContext final : public StreamContext {
 public:
  bool is_asynchronous() const override { return false; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override { return nullptr; }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    if (bytes <= 0) return absl::OkStatus();
    // cudaMemcpy may return before a copy from pageable memory has landed; the wait makes the
    // copy done when Copy returns, as a CPU stream promises.
    absl::Status status =
        CudaStatus(cudaMemcpy(destination, source, static_cast<size_t>(bytes), cudaMemcpyDefault),
                   absl::StrCat("copying ", bytes, " bytes on a CPU stream"));
    if (!status.ok()) return status;
    return CudaStatus(cudaStreamSynchronize(cudaStreamLegacy), "finishing a copy on a CPU stream");
  }
};

}  // namespace

absl::Status UseCuda(JobOptions* options) {
  absl::StatusOr<int> count = DeviceCount();
  if (!count.ok()) return count.status();
  const int devices = *count;
  options->stream_context_factory =
      [devices](const plan::Stream& stream) -> std::unique_ptr<StreamContext> {
    if (stream.device().type() == plan::CPU) return std::make_unique<HostStreamContext>();
    if (stream.device().type() != plan::CUDA || stream.device().index() >= devices) return nullptr;
    absl::StatusOr<std::unique_ptr<CudaStreamContext>> context =
        CudaStreamContext::Create(stream.device().index());
    if (!context.ok()) {
      LOG(ERROR) << context.status();
      return nullptr;
    }
    return std::move(*context);
  };
  options->memory_resource_factory =
      [devices](const plan::Device& device) -> absl::StatusOr<std::unique_ptr<MemoryResource>> {
    if (device.type() == plan::CPU) return std::make_unique<PinnedHostMemoryResource>();
    if (device.type() != plan::CUDA) return nullptr;
    if (device.index() >= devices) {
      return absl::FailedPreconditionError(
          absl::StrCat("the plan places work on cuda:", device.index(), ", but this node has ",
                       devices, " GPU(s)"));
    }
    return std::make_unique<CachingCudaMemoryResource>(device.index());
  };
  // Communicators of GPUs get NCCL (joined across nodes at launch); the others (null) the
  // runtime's own backends.
  const absl::Duration timeout = options->collective_timeout;
  options->collective_backend_factory = [timeout](const plan::Communicator& communicator,
                                                  const plan::Plan& plan) {
    return MakeNcclCollectivesIfGpus(communicator, plan, timeout);
  };
  return absl::OkStatus();
}

}  // namespace loom::cuda
