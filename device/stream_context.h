#ifndef LOOM_DEVICE_STREAM_CONTEXT_H_
#define LOOM_DEVICE_STREAM_CONTEXT_H_

// What the runtime and kernels know of a device stream: StreamContext (synchronous or not, copies,
// float32 accumulation, completion events), CompletionEvent (a point in an asynchronous stream),
// SynchronousStreamContext (the CPU streams' context) and EnqueueCopyToHost. Stream threads, actors
// and kernels use it; CUDA streams are device/cuda/cuda_stream_context.h.

#include <cstdint>
#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom {

// Marks the point in an asynchronous stream after the work enqueued so far (a CUDA event).
class CompletionEvent {
 public:
  virtual ~CompletionEvent() = default;
  // Polled by the stream's thread: true once all work enqueued before the event has finished,
  // false while it runs, an error when that work failed (the stream's thread then fails the job:
  // consumers elsewhere are never told of data the failed work was to write).
  virtual absl::StatusOr<bool> IsComplete() = 0;
};

// What the runtime knows of a device stream. CPU streams are synchronous: a kernel is done when
// it returns, and every consumer may be told at once. An asynchronous stream (CUDA) only enqueues:
// consumers on the same stream may be told at once (stream order protects the data), consumers on
// other streams or nodes only after a completion event recorded after the act has completed.
class StreamContext {
 public:
  virtual ~StreamContext() = default;
  virtual bool is_asynchronous() const = 0;
  // Records an event after the work enqueued so far. Only called on asynchronous streams.
  virtual std::unique_ptr<CompletionEvent> RecordCompletion() = 0;
  // Called once on the stream's thread before its first act (a CUDA stream makes its device the
  // thread's current one).
  virtual void BindToThread() {}
  // Copies `bytes` between two buffers of this stream's device or the host, in stream order (a
  // CPU stream: done when it returns; a CUDA stream: enqueued).
  virtual absl::Status Copy(void* destination, const void* source, int64_t bytes) = 0;
  // sum[i] += values[i] for `count` float32 elements of this stream's device, in stream order
  // (gradient accumulation over micro-batches). The host loop here; a CUDA stream launches a
  // kernel.
  virtual absl::Status AddFloat32(float* sum, const float* values, int64_t count) {
    for (int64_t i = 0; i < count; ++i) sum[i] += values[i];
    return absl::OkStatus();
  }
  // Blocks until everything enqueued so far has finished (nothing to wait for on a CPU stream).
  virtual absl::Status Synchronize() { return absl::OkStatus(); }
};

// The context of a CPU stream.
class SynchronousStreamContext final : public StreamContext {
 public:
  bool is_asynchronous() const override { return false; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override { return nullptr; }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    if (bytes > 0) std::memcpy(destination, source, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
};

// A host tensor of `view`'s type and shape, its bytes copied from `view` on `stream`: done on a
// CPU stream; on a GPU stream only enqueued, so call stream.Synchronize() before reading it.
absl::StatusOr<HostTensor> EnqueueCopyToHost(StreamContext& stream, const TensorView& view);

}  // namespace loom

#endif  // LOOM_DEVICE_STREAM_CONTEXT_H_
