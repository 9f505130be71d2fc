// The completion path for asynchronous device streams, with a simulated device: consumers on the
// same stream hear of a slot at once, consumers elsewhere only after the act's work completed.
#include <atomic>
#include <chrono>
#include <cstring>

#include "actors/actor_factory.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "tests/runtime/runtime_test_util.h"
#include "tests/runtime/test_kernels.h"

namespace loom::testing {
namespace {

// Long against a thread's scheduling delays: the same-stream check below says that a consumer
// started within this time, and with 2 ms a run under ThreadSanitizer on a busy 2-core machine
// started it 2.5 ms after the producer's act.
constexpr int64_t kDeviceLatencyNanoseconds = 100'000'000;

// Work "completes" a fixed time after the event is recorded.
class DelayedCompletion final : public CompletionEvent {
 public:
  explicit DelayedCompletion(std::atomic<int>* recorded)
      : ready_at_(std::chrono::steady_clock::now() +
                  std::chrono::nanoseconds(kDeviceLatencyNanoseconds)) {
    recorded->fetch_add(1);
  }
  absl::StatusOr<bool> IsComplete() override {
    return std::chrono::steady_clock::now() >= ready_at_;
  }

 private:
  std::chrono::steady_clock::time_point ready_at_;
};

// The work before this event failed (a kernel fault).
class FailedCompletion final : public CompletionEvent {
 public:
  absl::StatusOr<bool> IsComplete() override {
    return absl::InternalError("simulated device fault");
  }
};

class SimulatedDeviceStream final : public StreamContext {
 public:
  // `fail_from`: events from this one on (counted from 0) report failed work.
  explicit SimulatedDeviceStream(std::atomic<int>* recorded, int fail_from = -1)
      : recorded_(recorded), fail_from_(fail_from) {}
  bool is_asynchronous() const override { return true; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override {
    if (fail_from_ >= 0 && recorded_->load() >= fail_from_) {
      recorded_->fetch_add(1);
      return std::make_unique<FailedCompletion>();
    }
    return std::make_unique<DelayedCompletion>(recorded_);
  }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    std::memcpy(destination, source, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  std::atomic<int>* recorded_;
  const int fail_from_;
};

TEST(AsyncStreamTest, OtherStreamsWaitForCompletionSameStreamDoesNot) {
  // producer and same_stream on the simulated device (cpu:0 stands in for it); other_stream on
  // cpu:1, a synchronous CPU stream.
  PlanBuilder builder("async");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}, plan::FLOAT32, 4).AddRegister("near", {4}).AddRegister("far", {4});
  builder.AddTask("producer", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(6);
  builder.AddTask("same_stream", plan::COMPUTE, 0, {"x"}, {"near"}, "test_sum_plus_one");
  builder.AddTask("other_stream", plan::COMPUTE, 1, {"x"}, {"far"}, "test_sum_plus_one");
  builder.AddTask("near_sink", plan::SINK, 0, {"near"}, {});
  builder.AddTask("far_sink", plan::SINK, 1, {"far"}, {});

  std::atomic<int> recorded{0};
  JobOptions options;
  options.stream_context_factory =
      [&recorded](const plan::Stream& stream) -> std::unique_ptr<StreamContext> {
    if (stream.device().index() == 0) return std::make_unique<SimulatedDeviceStream>(&recorded);
    return std::make_unique<SynchronousStreamContext>();
  };
  auto job = MakeJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  ASSERT_TRUE((*job)->Run().ok());

  std::vector<ActEvent> produced = EventsOf(**job, "producer");
  std::vector<ActEvent> near = EventsOf(**job, "same_stream");
  std::vector<ActEvent> far = EventsOf(**job, "other_stream");
  ASSERT_EQ(produced.size(), 6u);
  ASSERT_EQ(near.size(), 6u);
  ASSERT_EQ(far.size(), 6u);
  for (int p = 0; p < 6; ++p) {
    EXPECT_GE(far[p].start_nanoseconds, produced[p].end_nanoseconds + kDeviceLatencyNanoseconds)
        << "piece " << p << " reached another stream before its device work completed";
  }
  // The same-stream consumer did not wait for the device: it started piece 0 before piece 0's
  // work could have completed.
  EXPECT_LT(near[0].start_nanoseconds, produced[0].end_nanoseconds + kDeviceLatencyNanoseconds);
  EXPECT_GT(recorded.load(), 0);
  // Values are right on both paths.
  std::vector<float> near_values = SinkValues(**job, "near_sink");
  std::vector<float> far_values = SinkValues(**job, "far_sink");
  for (int p = 0; p < 6; ++p) {
    EXPECT_EQ(near_values[p], p + 1.0f);
    EXPECT_EQ(far_values[p], p + 1.0f);
  }
}

TEST(AsyncStreamTest, FailedDeviceWorkFailsTheJobAndReachesNoOtherStream) {
  PlanBuilder builder("async_fault");
  builder.AddCpuDevices(2);
  builder.AddRegister("x", {4}, plan::FLOAT32, 4).AddRegister("far", {4});
  builder.AddTask("producer", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(6);
  builder.AddTask("other_stream", plan::COMPUTE, 1, {"x"}, {"far"}, "test_sum_plus_one");
  builder.AddTask("far_sink", plan::SINK, 1, {"far"}, {});

  std::atomic<int> recorded{0};
  JobOptions options;
  options.stream_context_factory =
      [&recorded](const plan::Stream& stream) -> std::unique_ptr<StreamContext> {
    if (stream.device().index() == 0) {
      return std::make_unique<SimulatedDeviceStream>(&recorded, /*fail_from=*/2);
    }
    return std::make_unique<SynchronousStreamContext>();
  };
  auto job = MakeJob(builder.plan(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status status = (*job)->Run();
  ASSERT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_NE(status.message().find("simulated device fault"), std::string::npos) << status;
  // Pieces 0 and 1 completed and were consumed; piece 2's work failed, so no other stream ever
  // heard of it or of anything after it.
  EXPECT_LE(EventsOf(**job, "other_stream").size(), 2u);
}

// A stream context that says when it is gone.
class TrackedStream final : public StreamContext {
 public:
  explicit TrackedStream(bool* destroyed) : destroyed_(destroyed) {}
  ~TrackedStream() override { *destroyed_ = true; }
  bool is_asynchronous() const override { return false; }
  std::unique_ptr<CompletionEvent> RecordCompletion() override { return nullptr; }
  absl::Status Copy(void* destination, const void* source, int64_t bytes) override {
    std::memcpy(destination, source, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }

 private:
  bool* destroyed_;
};

// Copies its input; when destroyed, notes whether its stream context was already gone (a CUDA
// kernel selects its GPU through the context to free its scratch).
class StreamUsingKernel final : public Kernel {
 public:
  StreamUsingKernel(const bool* stream_destroyed, bool* stream_gone_at_destruction)
      : stream_destroyed_(stream_destroyed),
        stream_gone_at_destruction_(stream_gone_at_destruction) {}
  ~StreamUsingKernel() override { *stream_gone_at_destruction_ = *stream_destroyed_; }
  absl::Status Compute(const KernelContext& context) override {
    std::memcpy(context.outputs[0].data, context.inputs[0].data,
                static_cast<size_t>(context.inputs[0].shape.NumElements()) * sizeof(float));
    return absl::OkStatus();
  }

 private:
  const bool* stream_destroyed_;
  bool* stream_gone_at_destruction_;
};

TEST(AsyncStreamTest, KernelsAreDestroyedBeforeTheirStreamContexts) {
  PlanBuilder builder("kernel_lifetime");
  builder.AddCpuDevices(1);
  builder.AddRegister("x", {4}).AddRegister("y", {4});
  builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece").set_num_pieces(2);
  builder.AddTask("user", plan::COMPUTE, 0, {"x"}, {"y"}, "stream_user");
  builder.AddTask("sink", plan::SINK, 0, {"y"}, {});

  bool stream_destroyed = false;
  bool stream_gone_at_destruction = false;
  KernelRegistry kernels;
  ASSERT_TRUE(RegisterCpuKernels(&kernels).ok());
  RegisterTestKernels(&kernels);
  ASSERT_TRUE(kernels
                  .Register("stream_user", plan::CPU,
                            [&](const KernelInit&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                              return std::make_unique<StreamUsingKernel>(
                                  &stream_destroyed, &stream_gone_at_destruction);
                            })
                  .ok());
  JobOptions options;
  options.stream_context_factory = [&](const plan::Stream&) -> std::unique_ptr<StreamContext> {
    return std::make_unique<TrackedStream>(&stream_destroyed);
  };
  {
    auto job = JobRuntime::Create(builder.plan(), &kernels, MakeActorFactory(), options);
    ASSERT_TRUE(job.ok()) << job.status();
    ASSERT_TRUE((*job)->Run().ok());
  }
  EXPECT_TRUE(stream_destroyed);
  EXPECT_FALSE(stream_gone_at_destruction) << "a kernel outlived the stream context it runs on";
}

TEST(AsyncStreamTest, NonCpuDeviceWithoutABackendIsRejected) {
  PlanBuilder builder("cuda_without_backend");
  builder.AddCpuDevices(1);
  builder.mutable_plan().mutable_devices(0)->mutable_device()->set_type(plan::CUDA);
  builder.AddRegister("x", {4});
  plan::Task& source = builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "test_piece");
  source.mutable_stream()->mutable_device()->set_type(plan::CUDA);
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(job.status().message().find("device node0/cuda:0: no memory"), std::string::npos)
      << job.status();

  // With memory but no stream context, the task is named.
  JobOptions options;
  options.memory_resource_factory =
      [](const plan::Device&) -> absl::StatusOr<std::unique_ptr<MemoryResource>> {
    return std::make_unique<HostMemoryResource>();
  };
  job = MakeJob(builder.plan(), std::move(options));
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(job.status().message().find("task 'source'"), std::string::npos) << job.status();
}

}  // namespace
}  // namespace loom::testing
