#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <tuple>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cast_kernel.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// The naive triple loop: c[batch][i][j] = sum_p op(a)[i][p] * op(b)[p][j], accumulated in double.
std::vector<float> ReferenceMatmul(const std::vector<float>& a, const std::vector<float>& b,
                                   int64_t batch, int64_t m, int64_t n, int64_t k, bool transpose_a,
                                   bool transpose_b, bool broadcast_b) {
  std::vector<float> c(batch * m * n);
  for (int64_t index = 0; index < batch; ++index) {
    const float* a_matrix = a.data() + index * m * k;
    const float* b_matrix = b.data() + (broadcast_b ? 0 : index * k * n);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (int64_t p = 0; p < k; ++p) {
          const float a_value = transpose_a ? a_matrix[p * m + i] : a_matrix[i * k + p];
          const float b_value = transpose_b ? b_matrix[j * k + p] : b_matrix[p * n + j];
          sum += static_cast<double>(a_value) * b_value;
        }
        c[(index * m + i) * n + j] = static_cast<float>(sum);
      }
    }
  }
  return c;
}

// Batch dimensions, m, n, k and whether b is rank 2 while a is batched.
struct MatmulCase {
  std::string name;
  std::vector<int64_t> batch_dimensions;
  int64_t m;
  int64_t n;
  int64_t k;
  bool broadcast_b;
};

void PrintTo(const MatmulCase& shape_case, std::ostream* stream) { *stream << shape_case.name; }

Shape MatrixShape(const std::vector<int64_t>& batch_dimensions, int64_t rows, int64_t columns) {
  std::vector<int64_t> dimensions = batch_dimensions;
  dimensions.push_back(rows);
  dimensions.push_back(columns);
  return Shape(dimensions);
}

// The shapes of a case's operands (a and b as stored, transposed or not) and its batch size.
struct OperandShapes {
  OperandShapes(const MatmulCase& shape_case, bool transpose_a, bool transpose_b) {
    for (int64_t dimension : shape_case.batch_dimensions) batch *= dimension;
    const int64_t m = shape_case.m, n = shape_case.n, k = shape_case.k;
    const std::vector<int64_t> b_batch =
        shape_case.broadcast_b ? std::vector<int64_t>() : shape_case.batch_dimensions;
    a = transpose_a ? MatrixShape(shape_case.batch_dimensions, k, m)
                    : MatrixShape(shape_case.batch_dimensions, m, k);
    b = transpose_b ? MatrixShape(b_batch, n, k) : MatrixShape(b_batch, k, n);
  }
  int64_t batch = 1;
  Shape a;
  Shape b;
};

class MatmulTest : public ::testing::TestWithParam<std::tuple<MatmulCase, bool, bool>> {};

TEST_P(MatmulTest, MatchesNaiveReference) {
  const auto& [shape_case, transpose_a, transpose_b] = GetParam();
  const OperandShapes shapes(shape_case, transpose_a, transpose_b);
  const int64_t batch = shapes.batch, m = shape_case.m, n = shape_case.n, k = shape_case.k;
  const std::vector<float> a = RandomFloats(shapes.a.NumElements(), 1);
  const std::vector<float> b = RandomFloats(shapes.b.NumElements(), 2);

  OpCall call("matmul");
  call.Attribute("transpose_a", BoolAttribute(transpose_a))
      .Attribute("transpose_b", BoolAttribute(transpose_b))
      .Input(FloatTensor(shapes.a, a))
      .Input(FloatTensor(shapes.b, b))
      .Output(MatrixShape(shape_case.batch_dimensions, m, n));
  // Garbage in the output: the kernel must overwrite every element.
  for (std::byte& byte : call.output(0).bytes) byte = std::byte{0x7f};
  ASSERT_TRUE(call.Run().ok());

  const std::vector<float> expected =
      ReferenceMatmul(a, b, batch, m, n, k, transpose_a, transpose_b, shape_case.broadcast_b);
  const std::vector<float> actual = call.OutputFloats();
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], 1e-5 * (1.0 + std::sqrt(static_cast<double>(k))))
        << "element " << i;
  }
}

TEST_P(MatmulTest, Bfloat16StoresInBfloat16AndAccumulatesInFloat32) {
  const auto& [shape_case, transpose_a, transpose_b] = GetParam();
  const OperandShapes shapes(shape_case, transpose_a, transpose_b);
  const int64_t batch = shapes.batch, m = shape_case.m, n = shape_case.n, k = shape_case.k;
  std::vector<float> a;
  std::vector<float> b;
  OpCall call("matmul");
  call.Attribute("transpose_a", BoolAttribute(transpose_a))
      .Attribute("transpose_b", BoolAttribute(transpose_b))
      .Input(Bfloat16Tensor(shapes.a, RandomFloats(shapes.a.NumElements(), 3), &a))
      .Input(Bfloat16Tensor(shapes.b, RandomFloats(shapes.b.NumElements(), 4), &b))
      .Output(MatrixShape(shape_case.batch_dimensions, m, n), plan::BFLOAT16);
  for (std::byte& byte : call.output(0).bytes) byte = std::byte{0x7f};
  ASSERT_TRUE(call.Run().ok());

  // The exact product of the bfloat16 inputs, rounded once: within half a bfloat16 unit in the
  // last place (at most 2^-8 relative: 8 significant bits) plus float32 accumulation error.
  // Rounding the inputs but not the product, or accumulating in bfloat16, misses this by far for k
  // in the tens.
  const std::vector<float> exact =
      ReferenceMatmul(a, b, batch, m, n, k, transpose_a, transpose_b, shape_case.broadcast_b);
  ASSERT_EQ(call.output(0).bytes.size(), 2 * exact.size());
  for (size_t i = 0; i < exact.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, call.output(0).bytes.data() + 2 * i, 2);
    const float actual = cpu::Bfloat16ToFloat32(bits);
    ASSERT_NEAR(
        actual, exact[i],
        std::ldexp(std::fabs(exact[i]), -8) + 1e-5 * (1.0 + std::sqrt(static_cast<double>(k))))
        << "element " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulTest,
    ::testing::Combine(::testing::Values(MatmulCase{"square", {}, 4, 4, 4, false},
                                         MatmulCase{"non_square", {}, 3, 5, 7, false},
                                         MatmulCase{"vector_like", {}, 1, 6, 9, false},
                                         MatmulCase{"larger", {}, 67, 45, 83, false},
                                         MatmulCase{"batched", {2, 3}, 3, 5, 4, false},
                                         MatmulCase{"batched_rank_3", {4}, 3, 5, 6, false},
                                         MatmulCase{"broadcast_b_rank_4", {2, 3}, 5, 2, 3, true},
                                         MatmulCase{"broadcast_b", {4}, 3, 5, 6, true},
                                         MatmulCase{"empty_inner", {2}, 3, 4, 0, false},
                                         MatmulCase{"empty_rows", {}, 0, 4, 3, false}),
                       ::testing::Bool(), ::testing::Bool()),
    [](const ::testing::TestParamInfo<MatmulTest::ParamType>& info) {
      return std::get<0>(info.param).name + (std::get<1>(info.param) ? "_ta" : "") +
             (std::get<2>(info.param) ? "_tb" : "");
    });

TEST(MatmulKernelTest, DefaultsToNoTranspose) {
  OpCall call("matmul");
  call.Input(FloatTensor({2, 3}, {1, 2, 3, 4, 5, 6}))
      .Input(FloatTensor({3, 2}, {7, 8, 9, 10, 11, 12}))
      .Output({2, 2});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(58, 64, 139, 154));
}

TEST(MatmulKernelTest, SingleBlasThreadGivesSameResult) {
  const int threads = BlasThreads();
  SetBlasThreads(1);
  EXPECT_EQ(BlasThreads(), 1);
  OpCall call("matmul");
  call.Input(FloatTensor({1, 2}, {1, 2})).Input(FloatTensor({2, 1}, {3, 4})).Output({1, 1});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(11));
  SetBlasThreads(threads);
}

TEST(MatmulKernelTest, RejectsInnerDimensionMismatch) {
  OpCall call("matmul", "layer0");
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({4, 5})).Output({2, 5});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = call.Build();
  ASSERT_EQ(kernel.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(kernel.status().message(),
            "task 'layer0' (op 'matmul'): matmul: inner dimensions differ: a is [2, 3] "
            "(transpose_a=false), b is [4, 5] (transpose_b=false)");
}

TEST(MatmulKernelTest, InnerDimensionMismatchNamesTranspose) {
  OpCall call("matmul");
  call.Attribute("transpose_a", BoolAttribute(true))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3, 5}))
      .Output({3, 5});
  EXPECT_THAT(call.Build().status().message(),
              HasSubstr("inner dimensions differ: a is [2, 3] (transpose_a=true)"));
}

TEST(MatmulKernelTest, RejectsWrongOutputShape) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({3, 5})).Output({2, 4});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("output c is [2, 4]"));
  EXPECT_THAT(status.message(), HasSubstr("is [2, 5]"));
}

TEST(MatmulKernelTest, RejectsBatchMismatch) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 2, 3})).Input(MakeTensor({3, 3, 5})).Output({2, 2, 5});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("batch dimensions differ"));
}

TEST(MatmulKernelTest, RejectsOutputBatchMismatch) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 2, 3})).Input(MakeTensor({3, 5})).Output({4, 2, 5});
  EXPECT_EQ(call.Build().status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MatmulKernelTest, RejectsBatchedBWithUnbatchedA) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3, 5})).Output({2, 5});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("b must have rank 2 or the rank of a"));
}

TEST(MatmulKernelTest, RejectsRankOne) {
  OpCall call("matmul");
  call.Input(MakeTensor({3})).Input(MakeTensor({3, 5})).Output({5});
  EXPECT_THAT(call.Build().status().message(), HasSubstr("rank >= 2"));
}

TEST(MatmulKernelTest, RejectsNonFloat32) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 3}, plan::INT32)).Input(MakeTensor({3, 5})).Output({2, 5});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'a' must be float32, got int32"));
}

TEST(MatmulKernelTest, RejectsMixedFloat32AndBfloat16) {
  OpCall call("matmul");
  call.Input(MakeTensor({2, 3}, plan::BFLOAT16)).Input(MakeTensor({3, 5})).Output({2, 5});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("input 'b' must be bfloat16, got float32"));
}

TEST(MatmulKernelTest, RejectsNonBooleanTranspose) {
  OpCall call("matmul");
  call.Attribute("transpose_a", IntAttribute(1))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3, 5}))
      .Output({2, 5});
  absl::Status status = call.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("matmul: attribute 'transpose_a' must be a boolean"));
}

}  // namespace
}  // namespace loom::kernel_test
