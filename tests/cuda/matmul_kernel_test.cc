#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::BoolAttribute;
using kernel_test::FloatTensor;
using kernel_test::OpCall;
using kernel_test::RandomFloats;
using ::testing::HasSubstr;

struct MatmulCase {
  Shape a;
  Shape b;
  Shape c;
  bool transpose_a = false;
  bool transpose_b = false;
};

void ExpectMatmulMatches(const MatmulCase& test_case, plan::DataType data_type, float tolerance) {
  OpCall call("matmul");
  call.Attribute("transpose_a", BoolAttribute(test_case.transpose_a))
      .Attribute("transpose_b", BoolAttribute(test_case.transpose_b))
      .Input(FloatTensor(test_case.a, RandomFloats(test_case.a.NumElements(), 1)))
      .Input(FloatTensor(test_case.b, RandomFloats(test_case.b.NumElements(), 2)))
      .Output(test_case.c);
  cuda_test::ExpectCudaMatchesCpu(call, tolerance, data_type);
}

const std::vector<MatmulCase>& Cases() {
  static const auto* cases = new std::vector<MatmulCase>{
      {Shape{7, 5}, Shape{5, 3}, Shape{7, 3}},
      {Shape{5, 7}, Shape{5, 3}, Shape{7, 3}, true, false},
      {Shape{7, 5}, Shape{3, 5}, Shape{7, 3}, false, true},
      {Shape{5, 7}, Shape{3, 5}, Shape{7, 3}, true, true},
      // Batched with batched b, and with one b shared by the batch (one tall GEMM, and the
      // strided path when a is transposed).
      {Shape{2, 3, 33, 17}, Shape{2, 3, 17, 9}, Shape{2, 3, 33, 9}},
      {Shape{4, 33, 17}, Shape{17, 65}, Shape{4, 33, 65}},
      {Shape{4, 17, 33}, Shape{17, 65}, Shape{4, 33, 65}, true, false},
      {Shape{256, 384}, Shape{384, 200}, Shape{256, 200}},
  };
  return *cases;
}

TEST(CudaMatmulTest, Float32MatchesTheCpuKernel) {
  LOOM_SKIP_WITHOUT_GPU();
  for (const MatmulCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.a.ToString() + " x " + test_case.b.ToString());
    ExpectMatmulMatches(test_case, plan::FLOAT32, 1e-5f);
  }
}

TEST(CudaMatmulTest, Bfloat16MatchesTheCpuKernelOnRoundedInputs) {
  LOOM_SKIP_WITHOUT_GPU();
  // Products of bf16 values are exact in f32 and both sides accumulate in f32; the difference
  // is the rounding of the result to bf16 (8 bits of mantissa) and the summation order.
  for (const MatmulCase& test_case : Cases()) {
    SCOPED_TRACE(test_case.a.ToString() + " x " + test_case.b.ToString());
    ExpectMatmulMatches(test_case, plan::BFLOAT16, 1e-2f);
  }
}

TEST(CudaMatmulTest, ZeroInnerDimensionWritesZeros) {
  LOOM_SKIP_WITHOUT_GPU();
  ExpectMatmulMatches({Shape{3, 0}, Shape{0, 4}, Shape{3, 4}}, plan::FLOAT32, 0.0f);
}

TEST(CudaMatmulTest, MismatchedShapesAndTypesAreRejectedNamingTheOp) {
  LOOM_SKIP_WITHOUT_GPU();
  OpCall call("matmul", "bad_matmul");
  call.Input(FloatTensor(Shape{2, 3}, RandomFloats(6, 1)))
      .Input(FloatTensor(Shape{4, 2}, RandomFloats(8, 2)))
      .Output(Shape{2, 2});
  KernelInit init = call.Init();
  init.stream = &cuda_test::TestStream();
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(kernel.status().message(), HasSubstr("inner dimensions differ"));

  init.inputs[1].set_data_type(plan::INT32);
  kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CudaMatmulTest, AKernelOnACpuStreamIsRefused) {
  // No GPU needed: the factory looks at the stream before touching CUDA.
  OpCall call("matmul", "misplaced");
  call.Input(FloatTensor(Shape{2, 3}, RandomFloats(6, 1)))
      .Input(FloatTensor(Shape{3, 2}, RandomFloats(6, 2)))
      .Output(Shape{2, 2});
  SynchronousStreamContext cpu_stream;
  KernelInit init = call.Init();
  init.stream = &cpu_stream;
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = cuda_test::Kernels().Create(plan::CUDA, init);
  ASSERT_FALSE(kernel.ok());
  EXPECT_EQ(kernel.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(kernel.status().message(), HasSubstr("task 'misplaced'"));
}

}  // namespace
}  // namespace loom
