#include "runtime/collectives/nccl_collectives.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "core/collective_shapes.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/collectives/shared_memory_collectives.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using cuda::NcclCollectives;
using ::testing::HasSubstr;

constexpr unsigned char kMarker = 0xab;

plan::Device MakeDevice(plan::DeviceType type, int index) {
  plan::Device device;
  device.set_node(0);
  device.set_type(type);
  device.set_index(index);
  return device;
}

// A communicator whose rank r is devices[r].
plan::Communicator MakeCommunicator(const std::string& name,
                                    const std::vector<plan::Device>& devices,
                                    int num_collectives = 1) {
  plan::Communicator communicator;
  communicator.set_name(name);
  for (const plan::Device& device : devices) *communicator.add_devices() = device;
  communicator.set_num_collectives(num_collectives);
  return communicator;
}

plan::Communicator GpuCommunicator(int size) {
  std::vector<plan::Device> devices;
  for (int rank = 0; rank < size; ++rank) devices.push_back(MakeDevice(plan::CUDA, rank));
  return MakeCommunicator("gpus", devices);
}

plan::Communicator CpuCommunicator(int size) {
  std::vector<plan::Device> devices;
  for (int rank = 0; rank < size; ++rank) devices.push_back(MakeDevice(plan::CPU, rank));
  return MakeCommunicator("cpus", devices);
}

plan::CollectiveConf MakeConf(plan::CollectiveKind kind, int axis = 0, int concat_axis = 0,
                              plan::ReduceOperation reduce = plan::REDUCE_SUM,
                              int64_t sequence = 0) {
  plan::CollectiveConf conf;
  conf.set_communicator("gpus");
  conf.set_kind(kind);
  conf.set_reduce(reduce);
  conf.set_axis(axis);
  conf.set_concat_axis(concat_axis);
  conf.set_sequence(sequence);
  conf.set_name(absl::StrCat(CollectiveKindName(kind), "_", axis, "_", concat_axis));
  return conf;
}

// Quarters of small integers of both signs: sums of a few of them are exact in any order.
HostTensor MakeInput(const Shape& shape, plan::DataType data_type, int seed) {
  std::vector<float> values(shape.NumElements());
  for (int64_t i = 0; i < static_cast<int64_t>(values.size()); ++i) {
    values[i] = static_cast<float>((i * 7 + seed * 5) % 23) * 0.25f - 2.5f;
  }
  HostTensor tensor = kernel_test::FloatTensor(shape, values);
  if (data_type == plan::BFLOAT16) return cuda_test::ToBfloat16(tensor);
  return tensor;
}

HostTensor MakeOutput(const Shape& shape, plan::DataType data_type) {
  HostTensor tensor = kernel_test::MakeTensor(shape, data_type);
  std::memset(tensor.bytes.data(), kMarker, tensor.bytes.size());
  return tensor;
}

// Every rank's output shape (its input's when the inputs do not fit together: the backends then
// fail, which the tests compare too).
std::vector<Shape> OutputShapes(const plan::CollectiveConf& conf,
                                const std::vector<HostTensor>& inputs) {
  std::vector<Shape> input_shapes;
  for (const HostTensor& input : inputs) input_shapes.push_back(input.shape);
  std::vector<Shape> shapes;
  for (int rank = 0; rank < static_cast<int>(inputs.size()); ++rank) {
    absl::StatusOr<Shape> shape = CollectiveOutputShape(conf, input_shapes, rank);
    shapes.push_back(shape.ok() ? *shape : inputs[rank].shape);
  }
  return shapes;
}

struct RankResults {
  std::vector<absl::Status> statuses;
  std::vector<HostTensor> outputs;
};

// Rank r's part of `conf` on its own thread, with host buffers, on the shared-memory backend.
RankResults RunSharedMemory(const plan::CollectiveConf& conf, std::vector<HostTensor> inputs) {
  const int size = static_cast<int>(inputs.size());
  SharedMemoryCollectives::Options options;
  options.timeout = absl::Seconds(30);
  SharedMemoryCollectives backend(CpuCommunicator(size), options);
  const std::vector<Shape> output_shapes = OutputShapes(conf, inputs);
  RankResults results;
  results.statuses.resize(size);
  for (int rank = 0; rank < size; ++rank) {
    results.outputs.push_back(MakeOutput(output_shapes[rank], inputs[rank].data_type));
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      results.statuses[rank] = backend.Run(
          CollectiveCall{rank, &conf, 0, inputs[rank].View(), results.outputs[rank].View()});
    });
  }
  for (std::thread& thread : threads) thread.join();
  return results;
}

// Rank r's part of `conf` on its own thread, with buffers on cuda:r, on `backend_of_rank[r]`.
RankResults RunOnGpus(const std::vector<CollectiveBackend*>& backend_of_rank,
                      const plan::CollectiveConf& conf, const std::vector<HostTensor>& inputs) {
  const int size = static_cast<int>(inputs.size());
  const std::vector<Shape> output_shapes = OutputShapes(conf, inputs);
  RankResults results;
  results.statuses.resize(size);
  std::vector<void*> device_inputs(size, nullptr);
  std::vector<void*> device_outputs(size, nullptr);
  for (int rank = 0; rank < size; ++rank) {
    results.outputs.push_back(MakeOutput(output_shapes[rank], inputs[rank].data_type));
    EXPECT_EQ(cudaSetDevice(rank), cudaSuccess);
    const size_t input_bytes = inputs[rank].bytes.size();
    const size_t output_bytes = results.outputs[rank].bytes.size();
    EXPECT_EQ(cudaMalloc(&device_inputs[rank], input_bytes + 1), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&device_outputs[rank], output_bytes + 1), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(device_inputs[rank], inputs[rank].bytes.data(), input_bytes,
                         cudaMemcpyHostToDevice),
              cudaSuccess);
    EXPECT_EQ(cudaMemset(device_outputs[rank], kMarker, output_bytes), cudaSuccess);
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      cudaSetDevice(rank);
      const TensorView input{device_inputs[rank], inputs[rank].data_type, inputs[rank].shape};
      const TensorView output{device_outputs[rank], results.outputs[rank].data_type,
                              results.outputs[rank].shape};
      results.statuses[rank] =
          backend_of_rank[rank]->Run(CollectiveCall{rank, &conf, 0, input, output});
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (int rank = 0; rank < size; ++rank) {
    EXPECT_EQ(cudaSetDevice(rank), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(results.outputs[rank].bytes.data(), device_outputs[rank],
                         results.outputs[rank].bytes.size(), cudaMemcpyDeviceToHost),
              cudaSuccess);
    cudaFree(device_inputs[rank]);
    cudaFree(device_outputs[rank]);
  }
  cudaSetDevice(0);
  return results;
}

// Every rank on one `backend`.
RankResults RunOnGpus(CollectiveBackend& backend, const plan::CollectiveConf& conf,
                      const std::vector<HostTensor>& inputs) {
  return RunOnGpus(std::vector<CollectiveBackend*>(inputs.size(), &backend), conf, inputs);
}

// Runs `conf` on `inputs` (one per rank, rank r on cuda:r) through a fresh NCCL backend and
// through the shared-memory backend, and expects the same statuses and bit-identical outputs.
void ExpectNcclMatchesSharedMemory(const plan::CollectiveConf& conf,
                                   const std::vector<HostTensor>& inputs) {
  const int size = static_cast<int>(inputs.size());
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(GpuCommunicator(size), 0, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  const RankResults expected = RunSharedMemory(conf, inputs);
  const RankResults actual = RunOnGpus(**backend, conf, inputs);
  for (int rank = 0; rank < size; ++rank) {
    SCOPED_TRACE(absl::StrCat("rank ", rank));
    EXPECT_EQ(actual.statuses[rank].code(), expected.statuses[rank].code())
        << "NCCL: " << actual.statuses[rank] << "\nshared memory: " << expected.statuses[rank];
    if (!expected.statuses[rank].ok() || !actual.statuses[rank].ok()) continue;
    EXPECT_EQ(actual.outputs[rank].shape, expected.outputs[rank].shape);
    EXPECT_TRUE(actual.outputs[rank].bytes == expected.outputs[rank].bytes)
        << "outputs differ; first values " << actual.outputs[rank].Values<float>()[0] << " vs "
        << expected.outputs[rank].Values<float>()[0];
  }
}

struct SingleRankCase {
  plan::CollectiveConf conf;
  Shape input;
};

std::vector<SingleRankCase> SingleRankCases() {
  return {
      {MakeConf(plan::ALL_REDUCE), Shape{3, 5}},
      {MakeConf(plan::ALL_REDUCE, 0, 0, plan::REDUCE_MAX), Shape{7}},
      {MakeConf(plan::ALL_GATHER, 0), Shape{3, 5}},
      {MakeConf(plan::ALL_GATHER, 1), Shape{3, 5}},
      {MakeConf(plan::ALL_GATHER, 1), Shape{2, 3, 4}},
      {MakeConf(plan::REDUCE_SCATTER, 0), Shape{4, 5}},
      {MakeConf(plan::REDUCE_SCATTER, 1), Shape{3, 5}},
      {MakeConf(plan::ALL_TO_ALL, 0, 1), Shape{4, 6}},
      {MakeConf(plan::ALL_TO_ALL, 1, 0), Shape{4, 6}},
      {MakeConf(plan::ALL_TO_ALL, 1, 2), Shape{2, 3, 4}},
  };
}

// A 1-rank communicator on cuda:0: every collective is the identity (reductions of float32
// only, as on every backend: bfloat16 all-reduce and reduce-scatter fail the same way).
TEST(NcclCollectivesTest, OneRankMatchesTheSharedMemoryBackend) {
  LOOM_SKIP_WITHOUT_GPU();
  for (plan::DataType data_type : {plan::FLOAT32, plan::BFLOAT16}) {
    for (const SingleRankCase& test_case : SingleRankCases()) {
      SCOPED_TRACE(absl::StrCat(DescribeCollective(test_case.conf), " of ",
                                test_case.input.ToString(), " as ",
                                data_type == plan::FLOAT32 ? "float32" : "bfloat16"));
      ExpectNcclMatchesSharedMemory(test_case.conf, {MakeInput(test_case.input, data_type, 1)});
    }
  }
}

TEST(NcclCollectivesTest, OneRankAllReduceIsTheIdentityAndTheTransportIsNccl) {
  LOOM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(GpuCommunicator(1), 0, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->transport(), "nccl");
  EXPECT_EQ((*backend)->size(), 1);
  EXPECT_EQ((*backend)->communicator(), "gpus");
  const HostTensor input = MakeInput(Shape{2, 3}, plan::FLOAT32, 4);
  // The same backend runs consecutive collectives.
  for (int repeat = 0; repeat < 3; ++repeat) {
    const RankResults results = RunOnGpus(**backend, MakeConf(plan::ALL_REDUCE), {input});
    ASSERT_TRUE(results.statuses[0].ok()) << results.statuses[0];
    EXPECT_TRUE(results.outputs[0].bytes == input.bytes);
  }
}

TEST(NcclCollectivesTest, AbortMakesLaterRunsFailWithTheReason) {
  LOOM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(GpuCommunicator(1), 0, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  const HostTensor input = MakeInput(Shape{4}, plan::FLOAT32, 2);
  const plan::CollectiveConf conf = MakeConf(plan::ALL_REDUCE);
  ASSERT_TRUE(RunOnGpus(**backend, conf, {input}).statuses[0].ok());
  (*backend)->Abort(absl::CancelledError("the job failed on another stream"));
  (*backend)->Abort(absl::InternalError("a later reason"));
  for (int repeat = 0; repeat < 2; ++repeat) {
    const absl::Status status = RunOnGpus(**backend, conf, {input}).statuses[0];
    EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
    EXPECT_THAT(status.message(), HasSubstr("the job failed on another stream"));
    EXPECT_THAT(status.message(), HasSubstr("communicator 'gpus'"));
    EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("a later reason")));
  }
}

TEST(NcclCollectivesTest, ACollectiveOutOfTheGlobalOrderFailsNamingIt) {
  LOOM_SKIP_WITHOUT_GPU();
  plan::Communicator communicator = GpuCommunicator(1);
  communicator.set_num_collectives(2);
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, 0, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  const plan::CollectiveConf second =
      MakeConf(plan::ALL_REDUCE, 0, 0, plan::REDUCE_SUM, /*sequence=*/1);
  const absl::Status status =
      RunOnGpus(**backend, second, {MakeInput(Shape{4}, plan::FLOAT32, 2)}).statuses[0];
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr(second.name()));
  EXPECT_THAT(status.message(), HasSubstr("communicator 'gpus'"));
}

// The checks below come before any CUDA call, so they run without a GPU too.
TEST(NcclCollectivesTest, ACpuRankFailsCreateNamingTheCommunicator) {
  const plan::Communicator communicator =
      MakeCommunicator("mixed", {MakeDevice(plan::CUDA, 0), MakeDevice(plan::CPU, 0)});
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, 0, absl::Seconds(30));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(), HasSubstr("communicator 'mixed'"));
  EXPECT_THAT(backend.status().message(), HasSubstr("cpu:0"));

  // As a backend factory it leaves such a communicator to another backend.
  plan::Plan plan;
  absl::StatusOr<std::unique_ptr<CollectiveBackend>> made =
      cuda::MakeNcclCollectivesIfGpus(communicator, plan, absl::Seconds(30));
  ASSERT_TRUE(made.ok()) << made.status();
  EXPECT_TRUE(*made == nullptr);
}

TEST(NcclCollectivesTest, AGpuListedTwiceFailsCreateNamingTheRepeat) {
  const plan::Communicator communicator =
      MakeCommunicator("twice", {MakeDevice(plan::CUDA, 0), MakeDevice(plan::CUDA, 0)});
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, 0, absl::Seconds(30));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(), HasSubstr("communicator 'twice'"));
  EXPECT_THAT(backend.status().message(), HasSubstr("ranks 0 and 1"));
  EXPECT_THAT(backend.status().message(), HasSubstr("cuda:0"));
}

TEST(NcclCollectivesTest, ACommunicatorWithoutRanksHereFailsCreate) {
  plan::Device remote = MakeDevice(plan::CUDA, 0);
  remote.set_node(1);
  const plan::Communicator communicator = MakeCommunicator("elsewhere", {remote});
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(communicator, 0, absl::Seconds(30));
  ASSERT_FALSE(backend.ok());
  EXPECT_EQ(backend.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(backend.status().message(), HasSubstr("communicator 'elsewhere'"));
  EXPECT_THAT(backend.status().message(), HasSubstr("no rank on node 0"));
}

// A communicator over two nodes, rank r on node r's cuda:`gpu_of_rank[r]`.
plan::Communicator TwoNodeCommunicator(int gpu_of_rank0, int gpu_of_rank1) {
  plan::Device first = MakeDevice(plan::CUDA, gpu_of_rank0);
  plan::Device second = MakeDevice(plan::CUDA, gpu_of_rank1);
  second.set_node(1);
  return MakeCommunicator("gpus", {first, second});
}

// Node 1's half of a two-node communicator: one GPU is enough, since rank 0 never joins.
TEST(NcclCollectivesTest, AJoinWithoutRankZerosIdFailsNamingTheCommunicator) {
  LOOM_SKIP_WITHOUT_GPU();
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(TwoNodeCommunicator(0, 0), 1, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  EXPECT_EQ((*backend)->join_id(), "") << "only the node of rank 0 makes the id";
  const absl::Status status = (*backend)->StartJoin("");
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << status;
  EXPECT_THAT(status.message(), HasSubstr("communicator 'gpus'"));
  EXPECT_THAT(status.message(), HasSubstr("node 0"));
  EXPECT_EQ((*backend)->StartJoin("too short").code(), absl::StatusCode::kFailedPrecondition);
}

TEST(NcclCollectivesTest, AJoinNobodyAnswersEndsAtItsDeadlineOrItsAbort) {
  LOOM_SKIP_WITHOUT_GPU();
  // Rank 0 (node 0) makes the id but never joins: node 1's half waits for it. A fresh id (and
  // bootstrap root) for each case.
  for (const bool abort : {false, true}) {
    SCOPED_TRACE(abort ? "aborted" : "deadline");
    absl::StatusOr<std::unique_ptr<NcclCollectives>> root =
        NcclCollectives::Create(TwoNodeCommunicator(0, 0), 0, absl::Seconds(30));
    ASSERT_TRUE(root.ok()) << root.status();
    const std::string id = (*root)->join_id();
    ASSERT_EQ(id.size(), sizeof(ncclUniqueId));
    absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
        NcclCollectives::Create(TwoNodeCommunicator(0, 0), 1, absl::Seconds(30));
    ASSERT_TRUE(backend.ok()) << backend.status();
    ASSERT_TRUE((*backend)->StartJoin(id).ok());
    std::thread aborter([&] {
      if (!abort) return;
      absl::SleepFor(absl::Milliseconds(200));
      (*backend)->Abort(absl::CancelledError("the job was cancelled"));
    });
    const absl::Time start = absl::Now();
    const absl::Status status =
        (*backend)->FinishJoin(start + (abort ? absl::Seconds(60) : absl::Milliseconds(500)));
    aborter.join();
    EXPECT_EQ(status.code(),
              abort ? absl::StatusCode::kAborted : absl::StatusCode::kDeadlineExceeded)
        << status;
    EXPECT_THAT(status.message(), HasSubstr("communicator 'gpus'"));
    if (abort) {
      EXPECT_THAT(status.message(), HasSubstr("the job was cancelled"));
    }
    EXPECT_LT(absl::Now() - start, absl::Seconds(10));
    // Failed for good.
    EXPECT_FALSE((*backend)->StartJoin(id).ok());
  }
}

int VisibleGpus() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) return 0;
  return count;
}

TEST(NcclCollectivesTest, TwoRanksAllReduceFromTwoThreads) {
  LOOM_SKIP_WITHOUT_GPU();
  if (VisibleGpus() < 2)
    GTEST_SKIP() << "a 2-rank NCCL communicator needs 2 GPUs; this machine "
                 << "has " << VisibleGpus();
  absl::StatusOr<std::unique_ptr<NcclCollectives>> backend =
      NcclCollectives::Create(GpuCommunicator(2), 0, absl::Seconds(30));
  ASSERT_TRUE(backend.ok()) << backend.status();
  const std::vector<HostTensor> inputs = {MakeInput(Shape{3, 5}, plan::FLOAT32, 1),
                                          MakeInput(Shape{3, 5}, plan::FLOAT32, 2)};
  for (int repeat = 0; repeat < 3; ++repeat) {
    const RankResults results = RunOnGpus(**backend, MakeConf(plan::ALL_REDUCE), inputs);
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(results.statuses[rank].ok()) << results.statuses[rank];
      absl::Span<const float> sums = results.outputs[rank].Values<float>();
      absl::Span<const float> first = inputs[0].Values<float>();
      absl::Span<const float> second = inputs[1].Values<float>();
      for (int i = 0; i < 15; ++i) EXPECT_EQ(sums[i], first[i] + second[i]) << "element " << i;
    }
  }
}

// Two nodes in one process, one rank each: node 0 makes the id, both join with it, and the
// collectives run with each node's ranks on its own backend (the shapes of the other node's rank
// assumed from the plan's balanced slices).
TEST(NcclCollectivesTest, TwoNodesJoinWithRankZerosIdAndRunCollectives) {
  LOOM_SKIP_WITHOUT_GPU();
  if (VisibleGpus() < 2)
    GTEST_SKIP() << "a 2-rank NCCL communicator needs 2 GPUs; this machine "
                 << "has " << VisibleGpus();
  absl::StatusOr<std::unique_ptr<NcclCollectives>> node0 =
      NcclCollectives::Create(TwoNodeCommunicator(0, 1), 0, absl::Seconds(30));
  absl::StatusOr<std::unique_ptr<NcclCollectives>> node1 =
      NcclCollectives::Create(TwoNodeCommunicator(0, 1), 1, absl::Seconds(30));
  ASSERT_TRUE(node0.ok()) << node0.status();
  ASSERT_TRUE(node1.ok()) << node1.status();
  const std::string id = (*node0)->join_id();
  ASSERT_EQ(id.size(), sizeof(ncclUniqueId));
  ASSERT_TRUE((*node0)->StartJoin(id).ok());
  ASSERT_TRUE((*node1)->StartJoin(id).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  ASSERT_TRUE((*node0)->FinishJoin(deadline).ok());
  ASSERT_TRUE((*node1)->FinishJoin(deadline).ok());

  const std::vector<CollectiveBackend*> backends = {node0->get(), node1->get()};
  struct TwoNodeCase {
    plan::CollectiveConf conf;
    Shape input0;
    Shape input1;
  };
  const std::vector<TwoNodeCase> cases = {
      {MakeConf(plan::ALL_REDUCE), Shape{4, 3}, Shape{4, 3}},
      {MakeConf(plan::ALL_GATHER, 0), Shape{3, 3}, Shape{2, 3}},
      {MakeConf(plan::ALL_GATHER, 1), Shape{3, 2, 4}, Shape{3, 2, 4}},
      {MakeConf(plan::REDUCE_SCATTER, 0), Shape{5, 3}, Shape{5, 3}},
      {MakeConf(plan::ALL_TO_ALL, 0, 1), Shape{5, 3}, Shape{5, 2}},
      {MakeConf(plan::ALL_TO_ALL, 1, 0), Shape{3, 5}, Shape{2, 5}},
  };
  for (const TwoNodeCase& test_case : cases) {
    SCOPED_TRACE(absl::StrCat(DescribeCollective(test_case.conf), " of ",
                              test_case.input0.ToString(), " and ", test_case.input1.ToString()));
    const std::vector<HostTensor> inputs = {MakeInput(test_case.input0, plan::FLOAT32, 1),
                                            MakeInput(test_case.input1, plan::FLOAT32, 2)};
    const RankResults expected = RunSharedMemory(test_case.conf, inputs);
    const RankResults actual = RunOnGpus(backends, test_case.conf, inputs);
    for (int rank = 0; rank < 2; ++rank) {
      ASSERT_TRUE(expected.statuses[rank].ok()) << expected.statuses[rank];
      ASSERT_TRUE(actual.statuses[rank].ok()) << actual.statuses[rank];
      EXPECT_EQ(actual.outputs[rank].shape, expected.outputs[rank].shape);
      EXPECT_TRUE(actual.outputs[rank].bytes == expected.outputs[rank].bytes) << "rank " << rank;
    }
  }
}

// Uneven splits and inner axes, where NCCL needs per-rank calls and staging copies.
TEST(NcclCollectivesTest, TwoRanksMatchTheSharedMemoryBackend) {
  LOOM_SKIP_WITHOUT_GPU();
  if (VisibleGpus() < 2)
    GTEST_SKIP() << "a 2-rank NCCL communicator needs 2 GPUs; this machine "
                 << "has " << VisibleGpus();
  struct TwoRankCase {
    plan::CollectiveConf conf;
    Shape input0;
    Shape input1;
  };
  const std::vector<TwoRankCase> cases = {
      {MakeConf(plan::ALL_REDUCE, 0, 0, plan::REDUCE_MAX), Shape{4, 3}, Shape{4, 3}},
      {MakeConf(plan::ALL_GATHER, 0), Shape{2, 3}, Shape{2, 3}},
      {MakeConf(plan::ALL_GATHER, 0), Shape{2, 3}, Shape{1, 3}},
      {MakeConf(plan::ALL_GATHER, 1), Shape{3, 2, 4}, Shape{3, 5, 4}},
      {MakeConf(plan::REDUCE_SCATTER, 0), Shape{4, 3}, Shape{4, 3}},
      {MakeConf(plan::REDUCE_SCATTER, 0), Shape{5, 3}, Shape{5, 3}},
      {MakeConf(plan::REDUCE_SCATTER, 1), Shape{2, 5, 3}, Shape{2, 5, 3}},
      {MakeConf(plan::ALL_TO_ALL, 0, 0), Shape{4, 3}, Shape{4, 3}},
      {MakeConf(plan::ALL_TO_ALL, 0, 1), Shape{5, 3}, Shape{5, 3}},
      {MakeConf(plan::ALL_TO_ALL, 1, 0), Shape{2, 5}, Shape{3, 5}},
      {MakeConf(plan::ALL_TO_ALL, 2, 1), Shape{2, 3, 5}, Shape{2, 1, 5}},
  };
  for (plan::DataType data_type : {plan::FLOAT32, plan::BFLOAT16}) {
    for (const TwoRankCase& test_case : cases) {
      SCOPED_TRACE(absl::StrCat(DescribeCollective(test_case.conf), " of ",
                                test_case.input0.ToString(), " and ", test_case.input1.ToString(),
                                " as ", data_type == plan::FLOAT32 ? "float32" : "bfloat16"));
      ExpectNcclMatchesSharedMemory(test_case.conf, {MakeInput(test_case.input0, data_type, 1),
                                                     MakeInput(test_case.input1, data_type, 2)});
    }
  }
}

}  // namespace
}  // namespace loom
