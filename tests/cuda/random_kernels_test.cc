#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/data_type.h"
#include "device/cuda/cuda_status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::BoolAttribute;
using kernel_test::FloatAttribute;
using kernel_test::IntAttribute;
using kernel_test::IntListAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::StringAttribute;
using ::testing::HasSubstr;

// The normal distribution's tolerance: CUDA's double log and cos may differ from glibc's in the
// last bit of the double, which after rounding to float32 is at most one float32 ulp (~6e-8
// relative), and nearly always nothing.
constexpr float kNormalTolerance = 1e-6f;

// A GPU buffer freed when it goes out of scope.
struct DeviceBuffer {
  void* data = nullptr;
  ~DeviceBuffer() {
    if (data != nullptr) cudaFree(data);
  }
};

// Builds `call`'s CUDA kernel (the random ops have no inputs) once and runs it on each of
// `pieces` (cuda_test::RunOnCuda runs piece 0 only). Returns the outputs of each piece.
absl::StatusOr<std::vector<std::vector<HostTensor>>> RunCudaPieces(
    OpCall& call, const std::vector<int64_t>& pieces) {
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  if (!kernel.ok()) return kernel.status();
  std::vector<DeviceBuffer> buffers(init.outputs.size());
  std::vector<TensorView> outputs;
  for (size_t j = 0; j < init.outputs.size(); ++j) {
    const HostTensor& host = call.output(static_cast<int>(j));
    const size_t bytes = std::max<size_t>(host.bytes.size(), 1);
    if (absl::Status status = cuda::CudaStatus(cudaMalloc(&buffers[j].data, bytes), "test output");
        !status.ok()) {
      return status;
    }
    outputs.push_back(TensorView{buffers[j].data, host.data_type, host.shape});
  }
  std::vector<std::vector<HostTensor>> results;
  for (int64_t piece : pieces) {
    for (const TensorView& output : outputs) {
      // Garbage, not zeros: the kernel must write every output element.
      cudaMemset(output.data, 0x7f, std::max<int64_t>(output.ByteSize(), 1));
    }
    if (absl::Status status = cuda::CudaStatus(cudaDeviceSynchronize(), "preparing the test");
        !status.ok()) {
      return status;
    }
    KernelContext context{{}, outputs, piece};
    if (absl::Status status = (*kernel)->Compute(context); !status.ok()) return status;
    if (absl::Status status = cuda_test::TestStream().Synchronize(); !status.ok()) return status;
    std::vector<HostTensor> piece_outputs;
    for (const TensorView& output : outputs) {
      HostTensor host = MakeTensor(output.shape, output.data_type);
      cudaMemcpy(host.bytes.data(), output.data, host.bytes.size(), cudaMemcpyDeviceToHost);
      piece_outputs.push_back(std::move(host));
    }
    results.push_back(std::move(piece_outputs));
  }
  return results;
}
// Runs the CPU kernel (OpCall::Run(piece)) and the CUDA kernel (one kernel for all pieces, in
// order) on each piece and expects the outputs to agree.
void ExpectPiecesMatchCpu(OpCall& call, const std::vector<int64_t>& pieces, float tolerance) {
  absl::StatusOr<std::vector<std::vector<HostTensor>>> cuda = RunCudaPieces(call, pieces);
  ASSERT_TRUE(cuda.ok()) << cuda.status();
  for (size_t p = 0; p < pieces.size(); ++p) {
    SCOPED_TRACE("piece " + std::to_string(pieces[p]));
    absl::Status status = call.Run(pieces[p]);
    ASSERT_TRUE(status.ok()) << status;
    cuda_test::ExpectSameTensor(call.output(0), (*cuda)[p][0], tolerance);
  }
}

// The CUDA factory fails as the CPU factory does: same code, same message.
void ExpectSameBuildError(const OpCall& call) {
  absl::Status cpu = call.Build().status();
  ASSERT_FALSE(cpu.ok());
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::Status cuda = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(cuda.code(), cpu.code());
  EXPECT_EQ(cuda.message(), cpu.message());
}

const std::vector<Shape>& Shapes() {
  static const auto* shapes = new std::vector<Shape>{
      Shape{1}, Shape{7}, Shape{1000}, Shape{3, 333}, Shape{2, 3, 65}, Shape{(1 << 18) + 7}};
  return *shapes;
}

// ---------------------------------------------------------------------------------------------
// random, uniform

TEST(CudaRandomTest, UniformMatchesTheCpuKernelBitForBit) {
  LOOM_SKIP_WITHOUT_GPU();
  // Integer mixing, then exact or correctly rounded double steps on both sides: tolerance 0.
  struct Range {
    double low;
    double high;
  };
  for (const Range& range :
       {Range{0.0, 1.0}, Range{-2.0, 3.0}, Range{-0.02, 0.02}, Range{1.5, 1.5}, Range{1e-3, 1e6}}) {
    for (const Shape& shape : Shapes()) {
      SCOPED_TRACE(std::to_string(range.low) + ".." + std::to_string(range.high) + " " +
                   shape.ToString());
      OpCall call("random");
      call.Attribute("seed", IntAttribute(42))
          .Attribute("distribution", StringAttribute("uniform"))
          .Attribute("low", FloatAttribute(range.low))
          .Attribute("high", FloatAttribute(range.high))
          .Output(shape);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaRandomTest, UniformDefaultsAndOffsetsMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (int64_t offset : std::vector<int64_t>{0, 1, 13, 50, int64_t{1} << 40}) {
    OpCall call("random");
    call.Attribute("seed", IntAttribute(9)).Attribute("offset", IntAttribute(offset)).Output({37});
    cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  }
  // A negative seed is a 64-bit pattern like any other.
  OpCall negative_seed("random");
  negative_seed.Attribute("seed", IntAttribute(-123456789)).Output({513});
  cuda_test::ExpectCudaMatchesCpu(negative_seed, 0.0f);
}

TEST(CudaRandomTest, UniformPiecesMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("random");
  call.Attribute("seed", IntAttribute(5)).Output({4, 257});
  // One kernel for every piece, pieces out of order and repeated.
  ExpectPiecesMatchCpu(call, {0, 1, 7, 3, 0, 1000000}, 0.0f);

  OpCall shared("random");
  shared.Attribute("seed", IntAttribute(5))
      .Attribute("same_every_piece", BoolAttribute(true))
      .Output({1000});
  ExpectPiecesMatchCpu(shared, {0, 4}, 0.0f);

  OpCall resumed("random");
  resumed.Attribute("seed", IntAttribute(5))
      .Attribute("first_step", IntAttribute(1000))
      .Output({1000});
  ExpectPiecesMatchCpu(resumed, {0, 3}, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// random, normal

TEST(CudaRandomTest, NormalMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  struct Moments {
    double mean;
    double std;
  };
  for (const Moments& moments :
       {Moments{0.0, 1.0}, Moments{1.5, 2.0}, Moments{-3.0, 0.02}, Moments{0.25, 0.0}}) {
    for (const Shape& shape : Shapes()) {
      SCOPED_TRACE(std::to_string(moments.mean) + " " + std::to_string(moments.std) + " " +
                   shape.ToString());
      OpCall call("random");
      call.Attribute("seed", IntAttribute(321))
          .Attribute("distribution", StringAttribute("normal"))
          .Attribute("mean", FloatAttribute(moments.mean))
          .Attribute("std", FloatAttribute(moments.std))
          .Output(shape);
      cuda_test::ExpectCudaMatchesCpu(call, kNormalTolerance);
    }
  }
}

TEST(CudaRandomTest, NormalPiecesMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("random");
  call.Attribute("seed", IntAttribute(7))
      .Attribute("distribution", StringAttribute("normal"))
      .Attribute("offset", IntAttribute(11))
      .Output({3, 4000});
  ExpectPiecesMatchCpu(call, {0, 1, 3, 0}, kNormalTolerance);

  OpCall resumed("random");
  resumed.Attribute("seed", IntAttribute(7))
      .Attribute("distribution", StringAttribute("normal"))
      .Attribute("first_step", IntAttribute(5))
      .Output({3, 4});
  ExpectPiecesMatchCpu(resumed, {0, 1, 3}, kNormalTolerance);
}

// ---------------------------------------------------------------------------------------------
// Windows of a logical tensor

struct TestWindow {
  std::vector<int64_t> begin;
  std::vector<int64_t> shape;
};

// Windows of a [5, 7, 6] tensor: uneven splits along each axis, windows cut along several axes,
// unit axes (which the CUDA kernel drops) and an empty window.
std::vector<TestWindow> TestWindows() {
  return {
      {{0, 0, 0}, {5, 7, 6}}, {{0, 0, 0}, {2, 7, 6}}, {{2, 0, 0}, {3, 7, 6}},
      {{4, 0, 0}, {1, 7, 6}}, {{0, 0, 0}, {5, 3, 6}}, {{0, 3, 0}, {5, 1, 6}},
      {{0, 4, 0}, {5, 3, 6}}, {{0, 0, 0}, {5, 7, 1}}, {{0, 0, 3}, {5, 7, 3}},
      {{1, 0, 2}, {3, 7, 3}}, {{2, 3, 1}, {2, 2, 4}}, {{4, 6, 5}, {1, 1, 1}},
      {{0, 2, 0}, {5, 0, 6}}, {{3, 2, 5}, {2, 5, 1}}, {{1, 6, 0}, {4, 1, 6}},
  };
}

TEST(CudaRandomTest, WindowsMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  const std::vector<int64_t> logical = {5, 7, 6};
  for (const std::string distribution : {"uniform", "normal"}) {
    const float tolerance = distribution == "uniform" ? 0.0f : kNormalTolerance;
    for (const TestWindow& window : TestWindows()) {
      SCOPED_TRACE(distribution + " begin " + ::testing::PrintToString(window.begin) + " shape " +
                   ::testing::PrintToString(window.shape));
      OpCall call("random");
      call.Attribute("seed", IntAttribute(77))
          .Attribute("distribution", StringAttribute(distribution))
          .Attribute("offset", IntAttribute(24))
          .Attribute("logical_shape", IntListAttribute(logical))
          .Attribute("slice_begin", IntListAttribute(window.begin))
          .Output(Shape(window.shape));
      ExpectPiecesMatchCpu(call, {0, 3}, tolerance);
    }
  }
  // logical_shape without slice_begin: the window starts at the origin.
  OpCall full("random");
  full.Attribute("seed", IntAttribute(3))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Output({4, 6});
  cuda_test::ExpectCudaMatchesCpu(full, 0.0f);
}

// ---------------------------------------------------------------------------------------------
// random_integers

TEST(CudaRandomIntegersTest, MatchesTheCpuKernelExactly) {
  LOOM_SKIP_WITHOUT_GPU();
  struct Case {
    plan::DataType data_type;
    int64_t high;
  };
  for (const Case& test_case : {Case{plan::INT32, 1}, Case{plan::INT32, 10},
                                Case{plan::INT32, 50257}, Case{plan::INT32, int64_t{1} << 31},
                                Case{plan::INT64, 1000000}, Case{plan::INT64, int64_t{1} << 40},
                                Case{plan::INT64, std::numeric_limits<int64_t>::max()}}) {
    for (const Shape& shape : Shapes()) {
      SCOPED_TRACE(std::string(DataTypeName(test_case.data_type)) + " high " +
                   std::to_string(test_case.high) + " " + shape.ToString());
      OpCall call("random_integers");
      call.Attribute("seed", IntAttribute(8))
          .Attribute("high", IntAttribute(test_case.high))
          .Output(shape, test_case.data_type);
      cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
    }
  }
}

TEST(CudaRandomIntegersTest, PiecesAndWindowsMatchTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (plan::DataType data_type : {plan::INT32, plan::INT64}) {
    OpCall call("random_integers");
    call.Attribute("seed", IntAttribute(9))
        .Attribute("high", IntAttribute(1000000))
        .Output({128, 3}, data_type);
    ExpectPiecesMatchCpu(call, {0, 1, 5, 0}, 0.0f);

    OpCall shared("random_integers");
    shared.Attribute("seed", IntAttribute(9))
        .Attribute("high", IntAttribute(1000))
        .Attribute("same_every_piece", BoolAttribute(true))
        .Attribute("first_step", IntAttribute(4))
        .Output({300}, data_type);
    ExpectPiecesMatchCpu(shared, {0, 2}, 0.0f);

    OpCall resumed("random_integers");
    resumed.Attribute("seed", IntAttribute(9))
        .Attribute("high", IntAttribute(1000))
        .Attribute("first_step", IntAttribute(1000))
        .Output({3, 4}, data_type);
    ExpectPiecesMatchCpu(resumed, {0, 1, 3}, 0.0f);

    for (const TestWindow& window : TestWindows()) {
      SCOPED_TRACE("begin " + ::testing::PrintToString(window.begin) + " shape " +
                   ::testing::PrintToString(window.shape));
      OpCall windowed("random_integers");
      windowed.Attribute("seed", IntAttribute(21))
          .Attribute("high", IntAttribute(50000))
          .Attribute("logical_shape", IntListAttribute({5, 7, 6}))
          .Attribute("slice_begin", IntListAttribute(window.begin))
          .Output(Shape(window.shape), data_type);
      ExpectPiecesMatchCpu(windowed, {2}, 0.0f);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Build-time errors

TEST(CudaRandomTest, FactoryErrorsAreTheCpuKernels) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall no_seed("random", "init_w");
  no_seed.Output({4});
  ExpectSameBuildError(no_seed);

  OpCall unknown_distribution("random", "init_w");
  unknown_distribution.Attribute("seed", IntAttribute(1))
      .Attribute("distribution", StringAttribute("poisson"))
      .Output({4});
  ExpectSameBuildError(unknown_distribution);

  OpCall foreign("random", "init_w");
  foreign.Attribute("seed", IntAttribute(1)).Attribute("std", FloatAttribute(1.0)).Output({4});
  ExpectSameBuildError(foreign);

  OpCall outside("random", "init_w");
  outside.Attribute("seed", IntAttribute(1))
      .Attribute("logical_shape", IntListAttribute({4, 6}))
      .Attribute("slice_begin", IntListAttribute({2, 0}))
      .Output({3, 6});
  ExpectSameBuildError(outside);

  OpCall negative_first_step("random", "init_w");
  negative_first_step.Attribute("seed", IntAttribute(1))
      .Attribute("first_step", IntAttribute(-1))
      .Output({4});
  ExpectSameBuildError(negative_first_step);

  // The CPU kernel writes float32 only; so does the CUDA kernel.
  OpCall bfloat16("random", "init_w");
  bfloat16.Attribute("seed", IntAttribute(1)).Output({4}, plan::BFLOAT16);
  ExpectSameBuildError(bfloat16);
  KernelInit init = bfloat16.Init();
  init.stream = &cuda_test::TestStream();
  absl::Status status = cuda_test::Kernels().Create(plan::CUDA, init).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'init_w'"));
  EXPECT_THAT(status.message(), HasSubstr("random: output 0 must be float32, got bfloat16"));
}

TEST(CudaRandomIntegersTest, FactoryErrorsAreTheCpuKernels) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall too_high("random_integers", "ids");
  too_high.Attribute("seed", IntAttribute(1))
      .Attribute("high", IntAttribute((int64_t{1} << 31) + 1))
      .Output({4}, plan::INT32);
  ExpectSameBuildError(too_high);

  OpCall missing("random_integers", "ids");
  missing.Attribute("seed", IntAttribute(1)).Output({4}, plan::INT64);
  ExpectSameBuildError(missing);

  OpCall float_output("random_integers", "ids");
  float_output.Attribute("seed", IntAttribute(1)).Attribute("high", IntAttribute(4)).Output({4});
  ExpectSameBuildError(float_output);
}

}  // namespace
}  // namespace loom
