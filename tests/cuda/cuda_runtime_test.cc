#include <cuda_runtime_api.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "device/cuda/cuda_devices.h"
#include "device/cuda/cuda_memory_resource.h"
#include "device/gpu_memory_budget.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "node/cuda_backend.h"
#include "runtime/device_memory.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"
#include "tests/cuda/cuda_test_util.h"

namespace loom {
namespace {

using cuda::CachingCudaMemoryResource;
using cuda::CudaStreamContext;
using ::testing::HasSubstr;

// What loomd's automatic GPU budget starts from (device/gpu_memory_budget.h).
TEST(CudaMemoryTest, TheGpuReportsItsFreeAndTotalMemory) {
  LOOM_SKIP_WITHOUT_GPU();
  absl::StatusOr<GpuMemory> memory = cuda::DeviceMemory(0);
  ASSERT_TRUE(memory.ok()) << memory.status();
  EXPECT_GT(memory->total_bytes, int64_t{1} << 30);
  EXPECT_GT(memory->free_bytes, 0);
  EXPECT_LE(memory->free_bytes, memory->total_bytes);
  const int64_t budget = DefaultGpuMemoryBudget(*memory);
  EXPECT_LT(budget, memory->free_bytes);
  EXPECT_GT(budget, memory->total_bytes / 2) << "a GPU this test has to itself is mostly free";
  EXPECT_FALSE(cuda::DeviceMemory(1 << 20).ok()) << "no such GPU";
}

TEST(CudaMemoryTest, BlocksAreZeroedCachedAndReused) {
  LOOM_SKIP_WITHOUT_GPU();
  auto resource = std::make_unique<CachingCudaMemoryResource>(0);
  CachingCudaMemoryResource* cache = resource.get();
  DeviceMemory memory("node0/cuda:0", 0, std::move(resource));
  absl::StatusOr<void*> first = memory.Allocate(1000, "first");
  ASSERT_TRUE(first.ok()) << first.status();
  std::vector<unsigned char> host(1000, 1);
  ASSERT_EQ(cudaMemcpy(host.data(), *first, 1000, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(host.begin(), host.end(), 0), 1000);
  // Dirty it, free it, and take a block of the same size class: the cached one, zeroed again.
  ASSERT_EQ(cudaMemset(*first, 0xff, 1000), cudaSuccess);
  memory.Free(*first);
  EXPECT_EQ(cache->cached_bytes(), CachingCudaMemoryResource::SizeClass(1000));
  absl::StatusOr<void*> second = memory.Allocate(900, "second");
  ASSERT_TRUE(second.ok());
  EXPECT_EQ(*second, *first);
  EXPECT_EQ(cache->driver_allocations(), 1);
  ASSERT_EQ(cudaMemcpy(host.data(), *second, 900, cudaMemcpyDeviceToHost), cudaSuccess);
  EXPECT_EQ(std::count(host.begin(), host.begin() + 900, 0), 900);
  memory.Free(*second);
}

TEST(CudaMemoryTest, TheDeviceBudgetAndTheGpuItselfRunOutWithNamedErrors) {
  LOOM_SKIP_WITHOUT_GPU();
  DeviceMemory memory("node0/cuda:0", 4 << 20, std::make_unique<CachingCudaMemoryResource>(0));
  absl::StatusOr<void*> too_big = memory.Allocate(8 << 20, "register 'huge' slot 0");
  ASSERT_FALSE(too_big.ok());
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(too_big.status().message(), HasSubstr("register 'huge' slot 0"));

  DeviceMemory unlimited("node0/cuda:0", 0, std::make_unique<CachingCudaMemoryResource>(0));
  absl::StatusOr<void*> impossible = unlimited.Allocate(int64_t{1} << 50, "register 'galaxy'");
  ASSERT_FALSE(impossible.ok());
  EXPECT_EQ(impossible.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(impossible.status().message(), HasSubstr("out of memory"));
  EXPECT_THAT(impossible.status().message(), HasSubstr("register 'galaxy'"));
  EXPECT_EQ(unlimited.used_bytes(), 0);
}

TEST(CudaStreamTest, CopiesRunInStreamOrderAndTheEventCompletes) {
  LOOM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<CudaStreamContext>> stream = CudaStreamContext::Create(0);
  ASSERT_TRUE(stream.ok()) << stream.status();
  constexpr int64_t kBytes = 64 << 20;
  cuda::PinnedHostMemoryResource pinned;
  absl::StatusOr<void*> source = pinned.Allocate(kBytes);
  absl::StatusOr<void*> back = pinned.Allocate(kBytes);
  ASSERT_TRUE(source.ok() && back.ok());
  std::memset(*source, 0x5a, kBytes);
  void* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, kBytes), cudaSuccess);
  ASSERT_TRUE((*stream)->Copy(device, *source, kBytes).ok());
  ASSERT_TRUE((*stream)->Copy(*back, device, kBytes).ok());
  std::unique_ptr<CompletionEvent> done = (*stream)->RecordCompletion();
  ASSERT_NE(done, nullptr);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool complete = false;
  while (!complete && std::chrono::steady_clock::now() < deadline) {
    absl::StatusOr<bool> polled = done->IsComplete();
    ASSERT_TRUE(polled.ok()) << polled.status();
    complete = *polled;
    if (!complete) std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  ASSERT_TRUE(complete);
  EXPECT_EQ(std::memcmp(*source, *back, kBytes), 0);
  cudaFree(device);
  pinned.Free(*source, kBytes);
  pinned.Free(*back, kBytes);
}

// cpu:0 makes two random matrices; they are copied to cuda:0 (on its copy-in stream), multiplied
// there, and copied back (by cpu:0, as the compiler places copies: on the reading device), and a
// sink on the GPU's stream also keeps the product. The same product on cpu:0 is the reference.
// Several pieces, two slots per register, so copies, kernels and completions of different pieces
// overlap.
TEST(CudaJobTest, APlanMovesDataToTheGpuComputesAndBringsItBack) {
  LOOM_SKIP_WITHOUT_GPU();
  PlanBuilder builder("cuda_job");
  builder.AddCpuDevices(2);
  builder.mutable_plan().mutable_devices(1)->mutable_device()->set_type(plan::CUDA);
  builder.mutable_plan().mutable_devices(1)->mutable_device()->set_index(0);
  builder.AddRegister("a", {64, 48}).AddRegister("b", {48, 32});
  builder.AddRegister("a_gpu", {64, 48}).AddRegister("b_gpu", {48, 32});
  builder.AddRegister("c_gpu", {64, 32}).AddRegister("c_back", {64, 32});
  builder.AddRegister("c_cpu", {64, 32});
  auto on_gpu = [](plan::Task& task, plan::StreamKind kind) {
    task.mutable_stream()->mutable_device()->set_type(plan::CUDA);
    task.mutable_stream()->mutable_device()->set_index(0);
    task.mutable_stream()->set_kind(kind);
  };
  plan::Task& a = builder.AddTask("a", plan::SOURCE, 0, {}, {"a"}, "random");
  a.set_num_pieces(5);
  PlanBuilder::SetAttribute(a, "seed", 1);
  plan::Task& b = builder.AddTask("b", plan::SOURCE, 0, {}, {"b"}, "random");
  b.set_num_pieces(5);
  PlanBuilder::SetAttribute(b, "seed", 2);
  on_gpu(builder.AddTask("a_in", plan::COPY, 0, {"a"}, {"a_gpu"}), plan::STREAM_COPY_IN);
  on_gpu(builder.AddTask("b_in", plan::COPY, 0, {"b"}, {"b_gpu"}), plan::STREAM_COPY_IN);
  on_gpu(builder.AddTask("gpu_matmul", plan::COMPUTE, 0, {"a_gpu", "b_gpu"}, {"c_gpu"}, "matmul"),
         plan::STREAM_COMPUTE);
  builder.AddTask("c_out", plan::COPY, 0, {"c_gpu"}, {"c_back"})
      .mutable_stream()
      ->set_kind(plan::STREAM_COPY_IN);
  builder.AddTask("cpu_matmul", plan::COMPUTE, 0, {"a", "b"}, {"c_cpu"}, "matmul");
  builder.AddTask("host_sink", plan::SINK, 0, {"c_back"}, {});
  on_gpu(builder.AddTask("device_sink", plan::SINK, 0, {"c_gpu"}, {}), plan::STREAM_COMPUTE);
  builder.AddTask("cpu_sink", plan::SINK, 0, {"c_cpu"}, {});
  // Registers live on their producer's device: a_gpu, b_gpu, c_gpu on the GPU, c_back on cpu:0.

  JobOptions options;
  ASSERT_TRUE(cuda::UseCuda(&options).ok());
  absl::StatusOr<std::unique_ptr<JobRuntime>> job =
      JobRuntime::Create(builder.plan(), &cuda_test::Kernels(), MakeActorFactory(), options);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::Status run = (*job)->Run();
  ASSERT_TRUE(run.ok()) << run;

  auto cpu = FetchedPieces(**job, "cpu_sink");
  ASSERT_TRUE(cpu.ok());
  for (const char* sink : {"host_sink", "device_sink"}) {
    auto gpu = FetchedPieces(**job, sink);
    ASSERT_TRUE(gpu.ok());
    ASSERT_EQ((**gpu)[0].size(), 5u) << sink;
    for (size_t piece = 0; piece < 5; ++piece) {
      absl::Span<const float> want = (**cpu)[0][piece].Values<float>();
      absl::Span<const float> got = (**gpu)[0][piece].Values<float>();
      ASSERT_EQ(want.size(), got.size());
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_NEAR(got[i], want[i], 1e-5f * (1 + std::fabs(want[i])))
            << sink << " piece " << piece << " element " << i;
      }
    }
  }
}

TEST(CudaJobTest, APlanForMoreGpusThanTheNodeHasIsRefused) {
  LOOM_SKIP_WITHOUT_GPU();
  PlanBuilder builder("too_many_gpus");
  builder.AddCpuDevices(1);
  builder.mutable_plan().mutable_devices(0)->mutable_device()->set_type(plan::CUDA);
  builder.mutable_plan().mutable_devices(0)->mutable_device()->set_index(4095);
  builder.AddRegister("x", {4});
  plan::Task& source = builder.AddTask("source", plan::SOURCE, 4095, {}, {"x"}, "fill");
  source.mutable_stream()->mutable_device()->set_type(plan::CUDA);
  JobOptions options;
  ASSERT_TRUE(cuda::UseCuda(&options).ok());
  auto job = JobRuntime::Create(builder.plan(), &cuda_test::Kernels(), MakeActorFactory(), options);
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(job.status().message(), HasSubstr("cuda:4095"));
}

TEST(CudaBackendTest, WithoutAGpuSettingUpSaysWhy) {
  if (cuda_test::NoGpuReason().empty()) GTEST_SKIP() << "this machine has a GPU";
  JobOptions options;
  absl::Status status = cuda::UseCuda(&options);
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(status.message(), HasSubstr("no usable CUDA device"));
}

}  // namespace
}  // namespace loom
