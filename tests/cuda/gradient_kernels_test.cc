#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using cuda_test::BuildOnCuda;
using kernel_test::FloatAttribute;
using kernel_test::FloatTensor;
using kernel_test::IntAttribute;
using kernel_test::IntListAttribute;
using kernel_test::MakeTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

constexpr float kFloat32Tolerance = 1e-5f;
constexpr float kBfloat16Tolerance = 2e-2f;

// Runs a call from `make_call` as float32 and a fresh one as bfloat16.
template <typename MakeCall>
void ExpectBothTypesMatch(const MakeCall& make_call) {
  {
    SCOPED_TRACE("float32");
    std::unique_ptr<OpCall> call = make_call();
    cuda_test::ExpectCudaMatchesCpu(*call, kFloat32Tolerance);
  }
  {
    SCOPED_TRACE("bfloat16");
    std::unique_ptr<OpCall> call = make_call();
    cuda_test::ExpectCudaMatchesCpu(*call, kBfloat16Tolerance, plan::BFLOAT16);
  }
}

// ----- relu_grad, gelu_grad, tanh_grad.

const std::vector<Shape>& ActivationShapes() {
  // Sizes below, at and above a block, not multiples of the vector width or the block, and empty.
  static const auto* shapes = new std::vector<Shape>{
      Shape{},         Shape{1},   Shape{7},       Shape{3, 5},
      Shape{4, 8, 33}, Shape{257}, Shape{1000003}, Shape{2, 0},
  };
  return *shapes;
}

// `grad_op`(forward, dy) with the forward tensor uniform in [low, high) (x, or y for tanh_grad).
void ExpectActivationGradMatches(const std::string& grad_op, float low, float high) {
  for (const Shape& shape : ActivationShapes()) {
    SCOPED_TRACE(grad_op + " " + shape.ToString());
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>(grad_op);
      call->Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 21, low, high)))
          .Input(FloatTensor(shape, RandomFloats(shape.NumElements(), 22, -2.0f, 2.0f)))
          .Output(shape);
      return call;
    });
  }
}

TEST(CudaGradientTest, ReluGradMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectActivationGradMatches("relu_grad", -1.0f, 1.0f);
}

TEST(CudaGradientTest, ReluGradIsZeroAtZero) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("relu_grad");
  call.Input(FloatTensor({3}, {0.0f, -1.0f, 2.0f}))
      .Input(FloatTensor({3}, {5.0f, 5.0f, 5.0f}))
      .Output({3});
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaGradientTest, GeluGradMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectActivationGradMatches("gelu_grad", -4.0f, 4.0f);
}

TEST(CudaGradientTest, TanhGradMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  // tanh_grad takes the forward output y, which lies in (-1, 1).
  ExpectActivationGradMatches("tanh_grad", -1.0f, 1.0f);
}

TEST(CudaGradientTest, ActivationGradsRejectBadConfigurations) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall shapes("gelu_grad", "bad_gelu_grad");
  shapes.Input(MakeTensor({2, 3})).Input(MakeTensor({3, 2})).Output({2, 3});
  absl::Status status = BuildOnCuda(shapes);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_gelu_grad'"));
  EXPECT_THAT(status.message(),
              HasSubstr("gelu_grad: input 'dy' has shape [3, 2] but input 'x' has shape [2, 3]"));

  OpCall output("tanh_grad");
  output.Input(MakeTensor({4})).Input(MakeTensor({4})).Output({5});
  status = BuildOnCuda(output);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("tanh_grad: output 'dx' has shape [5] but input 'y' has shape [4]"));

  OpCall arity("relu_grad");
  arity.Input(MakeTensor({4})).Output({4});
  status = BuildOnCuda(arity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("relu_grad: expects 2 inputs and 1 output, got 1 input and 1 output"));

  OpCall type("relu_grad");
  type.Input(MakeTensor({4}, plan::INT32)).Input(MakeTensor({4})).Output({4});
  status = BuildOnCuda(type);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("relu_grad: input 0 must be float32 or bfloat16"));

  // float32 and bfloat16 mixed.
  KernelInit mixed = type.Init();
  mixed.stream = &cuda_test::TestStream();
  mixed.inputs[0].set_data_type(plan::BFLOAT16);
  status = cuda_test::Kernels().Create(plan::CUDA, mixed).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// ----- reduce_sum_to.

struct ReduceCase {
  Shape input;
  Shape output;
};

const std::vector<ReduceCase>& ReduceCases() {
  static const auto* cases = new std::vector<ReduceCase>{
      // The CPU tests' shapes.
      {Shape{2, 3, 4}, Shape{3, 1}},
      {Shape{2, 3, 4}, Shape{}},
      {Shape{2, 3, 4}, Shape{1, 4}},
      {Shape{2, 3, 4}, Shape{2, 1, 4}},
      {Shape{2, 3, 4}, Shape{1, 1, 1}},
      {Shape{2, 3, 4}, Shape{4}},
      {Shape{2, 3, 4}, Shape{2, 3, 4}},
      {Shape{2, 3}, Shape{2, 1}},
      {Shape{2, 3, 5}, Shape{5}},
      // Leading, middle and trailing axes summed, alone and together.
      {Shape{5, 7, 9, 11}, Shape{7, 9, 11}},
      {Shape{5, 7, 9, 11}, Shape{5, 1, 9, 11}},
      {Shape{5, 7, 9, 11}, Shape{5, 7, 9, 1}},
      {Shape{5, 7, 9, 11}, Shape{7, 1, 11}},
      {Shape{5, 7, 9, 11}, Shape{5, 1, 9, 1}},
      {Shape{5, 7, 9, 11}, Shape{1, 7, 1, 1}},
      {Shape{5, 1, 9, 11}, Shape{1, 1, 11}},
      // Bias gradients: many rows summed into a short or long row (split sums).
      {Shape{37, 1000}, Shape{1000}},
      {Shape{4099, 67}, Shape{67}},
      {Shape{8, 513, 300}, Shape{300}},
      // Long rows summed (a block per sum, split when there are few).
      {Shape{67, 4099}, Shape{67, 1}},
      {Shape{3, 100003}, Shape{1, 1}},
      {Shape{300007}, Shape{}},
      {Shape{64, 129, 33}, Shape{1, 129, 1}},
  };
  return *cases;
}

TEST(CudaGradientTest, ReduceSumToMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const ReduceCase& test_case : ReduceCases()) {
    SCOPED_TRACE(test_case.input.ToString() + " -> " + test_case.output.ToString());
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>("reduce_sum_to");
      call->Input(FloatTensor(test_case.input,
                              RandomFloats(test_case.input.NumElements(), 31, -2.0f, 2.0f)))
          .Output(test_case.output);
      return call;
    });
  }
}

TEST(CudaGradientTest, ReduceSumToIsExactOnSmallIntegers) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("reduce_sum_to");
  call.Input(FloatTensor({2, 3}, {1.0f, 2.0f, 3.0f, 10.0f, 20.0f, 30.0f})).Output({2, 1});
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaGradientTest, ReduceSumToOfAnEmptyInputWritesZeros) {
  LOOM_SKIP_WITHOUT_GPU();
  // RunOnCuda fills the outputs with garbage first: the kernel must write the zeros.
  OpCall call("reduce_sum_to");
  call.Input(MakeTensor({0, 3})).Output({1, 3});
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
  OpCall bfloat16("reduce_sum_to");
  bfloat16.Input(MakeTensor({0, 3})).Output({1, 3});
  cuda_test::ExpectCudaMatchesCpu(bfloat16, 0.0f, plan::BFLOAT16);
}

TEST(CudaGradientTest, ReduceSumToIsDeterministic) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const ReduceCase& test_case :
       {ReduceCase{Shape{3, 100003}, Shape{1, 1}}, ReduceCase{Shape{4099, 67}, Shape{67}}}) {
    SCOPED_TRACE(test_case.input.ToString() + " -> " + test_case.output.ToString());
    OpCall call("reduce_sum_to");
    call.Input(FloatTensor(test_case.input, RandomFloats(test_case.input.NumElements(), 41)))
        .Output(test_case.output);
    absl::StatusOr<std::vector<HostTensor>> first = cuda_test::RunOnCuda(call);
    ASSERT_TRUE(first.ok()) << first.status();
    for (int run = 0; run < 3; ++run) {
      absl::StatusOr<std::vector<HostTensor>> again = cuda_test::RunOnCuda(call);
      ASSERT_TRUE(again.ok()) << again.status();
      cuda_test::ExpectSameTensor((*first)[0], (*again)[0], 0.0f);
    }
  }
}

TEST(CudaGradientTest, ReduceSumToRejectsBadConfigurations) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall mismatch("reduce_sum_to", "bad_reduce");
  mismatch.Input(MakeTensor({2, 3, 4})).Output({3, 2});
  absl::Status status = BuildOnCuda(mismatch);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_reduce'"));
  EXPECT_THAT(status.message(),
              HasSubstr("reduce_sum_to: output 'dx' has shape [3, 2] which does not broadcast "
                        "to input 'dy' [2, 3, 4] (2 vs 4 at axis 2 of input 'dy')"));

  OpCall rank("reduce_sum_to");
  rank.Input(MakeTensor({3})).Output({1, 3});
  status = BuildOnCuda(rank);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("reduce_sum_to: output 'dx' has shape [1, 3] which does not broadcast "
                        "to input 'dy' [3] (rank 2 > 1)"));

  OpCall type("reduce_sum_to");
  type.Input(MakeTensor({3}, plan::INT32)).Output({3});
  status = BuildOnCuda(type);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("reduce_sum_to: input 0 must be float32 or bfloat16"));

  OpCall arity("reduce_sum_to");
  arity.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({3});
  status = BuildOnCuda(arity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
}

// ----- broadcast_to.

struct BroadcastCase {
  Shape input;
  Shape output;
  std::vector<int64_t> axes = {};  // No attribute when empty.
  double scale = 1.0;              // No attribute when 1.
};

const std::vector<BroadcastCase>& BroadcastCases() {
  static const auto* cases = new std::vector<BroadcastCase>{
      // NumPy broadcasting.
      {Shape{2, 1}, Shape{3, 2, 2}},
      {Shape{}, Shape{5, 7}},
      {Shape{7, 1, 11}, Shape{5, 7, 9, 11}},
      {Shape{5, 1, 9, 1}, Shape{5, 7, 9, 11}},
      {Shape{1, 7, 1, 1}, Shape{5, 7, 9, 11}},
      {Shape{4099}, Shape{3, 4099}},
      {Shape{67, 1}, Shape{67, 4099}},
      {Shape{1, 129, 1}, Shape{64, 129, 33}},
      {Shape{2, 3, 4}, Shape{2, 3, 4}},
      {Shape{1, 3}, Shape{0, 3}},
      // Axes the input lacks (the reduce_sum gradient without keep_dims), and with them kept.
      {Shape{2, 4}, Shape{2, 3, 4}, {1}},
      {Shape{3}, Shape{2, 3, 4}, {0, 2}},
      {Shape{2, 3}, Shape{2, 3, 4}, {-1}},
      {Shape{3, 4}, Shape{2, 3, 4}, {0}},
      {Shape{}, Shape{2, 3, 4}, {0, 1, 2}},
      {Shape{1, 3, 1}, Shape{2, 3, 4}, {0, 2}},
      {Shape{5, 9}, Shape{5, 7, 9, 11}, {1, 3}},
      // reduce_mean gradients: a scale.
      {Shape{2, 2}, Shape{2, 2, 2}, {1}, 0.5},
      {Shape{3}, Shape{2, 3, 4}, {0, -1}, 1.0 / 8.0},
      {Shape{2, 1, 4}, Shape{2, 3, 4}, {}, 1.0 / 3.0},
      {Shape{513, 1}, Shape{513, 1000}, {}, 1.0 / 1000.0},
  };
  return *cases;
}

TEST(CudaGradientTest, BroadcastToMatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const BroadcastCase& test_case : BroadcastCases()) {
    SCOPED_TRACE(test_case.input.ToString() + " -> " + test_case.output.ToString() + " axes " +
                 std::to_string(test_case.axes.size()) + " scale " +
                 std::to_string(test_case.scale));
    ExpectBothTypesMatch([&] {
      auto call = std::make_unique<OpCall>("broadcast_to");
      if (!test_case.axes.empty()) call->Attribute("axes", IntListAttribute(test_case.axes));
      if (test_case.scale != 1.0) call->Attribute("scale", FloatAttribute(test_case.scale));
      call->Input(FloatTensor(test_case.input,
                              RandomFloats(test_case.input.NumElements(), 51, -2.0f, 2.0f)))
          .Output(test_case.output);
      return call;
    });
  }
}

TEST(CudaGradientTest, BroadcastToIsExact) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("broadcast_to");
  call.Attribute("axes", IntListAttribute({1}))
      .Attribute("scale", FloatAttribute(0.5))
      .Input(FloatTensor({2, 2}, {1.0f, 2.0f, 3.0f, 4.0f}))
      .Output({2, 2, 2});
  cuda_test::ExpectCudaMatchesCpu(call, 0.0f);
}

TEST(CudaGradientTest, BroadcastToRejectsBadConfigurations) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall numpy("broadcast_to", "bad_broadcast");
  numpy.Input(MakeTensor({3})).Output({3, 2});
  absl::Status status = BuildOnCuda(numpy);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("task 'bad_broadcast'"));
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: input 'x' has shape [3] which does not broadcast to "
                        "output 'y' [3, 2] (3 vs 2 at axis 1 of output 'y')"));

  OpCall wrong("broadcast_to");
  wrong.Attribute("axes", IntListAttribute({0})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildOnCuda(wrong);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: input 'x' has shape [3] but output 'y' [3, 2] without "
                        "axes [0] is [2] (or [1, 2] keeping them as 1)"));

  OpCall range("broadcast_to");
  range.Attribute("axes", IntListAttribute({2})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildOnCuda(range);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' [2] has axis 2 outside output 'y' [3, 2]"));

  OpCall twice("broadcast_to");
  twice.Attribute("axes", IntListAttribute({1, -1})).Input(MakeTensor({3})).Output({3, 2});
  status = BuildOnCuda(twice);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' [1, -1] names axis 1 twice"));

  OpCall list("broadcast_to");
  list.Attribute("axes", IntAttribute(1)).Input(MakeTensor({3})).Output({3, 2});
  status = BuildOnCuda(list);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: attribute 'axes' must be a list of integers"));

  OpCall scale("broadcast_to");
  scale.Attribute("scale", FloatAttribute(NAN)).Input(MakeTensor({3})).Output({2, 3});
  status = BuildOnCuda(scale);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("broadcast_to: attribute 'scale' must be finite"));

  OpCall arity("broadcast_to");
  arity.Input(MakeTensor({3})).Input(MakeTensor({3})).Output({2, 3});
  status = BuildOnCuda(arity);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("broadcast_to: expects 1 input and 1 output, got 2 inputs and 1 output"));

  OpCall type("broadcast_to");
  type.Input(MakeTensor({3}, plan::INT64)).Output({2, 3});
  status = BuildOnCuda(type);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("broadcast_to: input 0 must be float32 or bfloat16"));
}

}  // namespace
}  // namespace loom
