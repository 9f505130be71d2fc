#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// The table rows V, the width D, and the ids (of shape [2, 3]) with their attributes.
struct EmbeddingCase {
  int64_t rows;
  int64_t width;
  HostTensor ids;
  int64_t row_offset = -1;
  int64_t logical_rows = -1;
};

void AddAttributes(const EmbeddingCase& test_case, OpCall& call) {
  if (test_case.row_offset >= 0) call.Attribute("row_offset", IntAttribute(test_case.row_offset));
  if (test_case.logical_rows >= 0) {
    call.Attribute("logical_rows", IntAttribute(test_case.logical_rows));
  }
}

// Checks embedding_grad against central differences of embedding with respect to its table.
void ExpectEmbeddingGradMatches(const EmbeddingCase& test_case) {
  const Shape table_shape({test_case.rows, test_case.width});
  const Shape output_shape({2, 3, test_case.width});
  const std::vector<float> table = RandomFloats(table_shape.NumElements(), 81);
  const std::vector<float> dy = RandomFloats(output_shape.NumElements(), 82, -2.0f, 2.0f);
  OpCall forward("embedding");
  AddAttributes(test_case, forward);
  forward.Input(FloatTensor(table_shape, table)).Input(test_case.ids).Output(output_shape);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(forward, 0, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad("embedding_grad");
  AddAttributes(test_case, grad);
  grad.Input(test_case.ids).Input(FloatTensor(output_shape, dy)).Output(table_shape);
  // Stale values, which must be overwritten.
  grad.output(0) = FloatTensor(table_shape, std::vector<float>(table_shape.NumElements(), 9.0f));
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, "dtable");
}

TEST(EmbeddingGradKernelTest, MatchesFiniteDifferencesWithRepeatedIds) {
  // Row 1 is looked up three times, rows 0 and 4 never.
  ExpectEmbeddingGradMatches({5, 4, Int32Tensor({2, 3}, {1, 3, 1, 2, 1, 3})});
}

TEST(EmbeddingGradKernelTest, MatchesFiniteDifferencesWithInt64Ids) {
  ExpectEmbeddingGradMatches({6, 3, Int64Tensor({2, 3}, {5, 0, 0, 4, 2, 5})});
}

TEST(EmbeddingGradKernelTest, VocabParallelSkipsOtherShardsIds) {
  // This shard holds rows [4, 7) of 10; ids 0, 2 and 9 belong to other shards.
  ExpectEmbeddingGradMatches(
      {3, 4, Int64Tensor({2, 3}, {4, 0, 6, 9, 4, 2}), /*row_offset=*/4, /*logical_rows=*/10});
  ExpectEmbeddingGradMatches({3, 2, Int32Tensor({2, 3}, {7, 5, 8, 1, 5, 12}), /*row_offset=*/5});
}

TEST(EmbeddingGradKernelTest, ExactSums) {
  OpCall grad("embedding_grad");
  grad.Input(Int32Tensor({3}, {2, 0, 2}))
      .Input(FloatTensor({3, 2}, {1.0f, 2.0f, 10.0f, 20.0f, 100.0f, 200.0f}))
      .Output({3, 2});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(grad.OutputFloats(),
              ::testing::ElementsAre(10.0f, 20.0f, 0.0f, 0.0f, 101.0f, 202.0f));
}

TEST(EmbeddingGradKernelTest, ComputeRejectsIdsOutsideTheLogicalTable) {
  OpCall grad("embedding_grad");
  grad.Attribute("row_offset", IntAttribute(2))
      .Attribute("logical_rows", IntAttribute(6))
      .Input(Int64Tensor({2, 2}, {0, 3, 6, 1}))
      .Input(MakeTensor({2, 2, 3}))
      .Output({2, 3});
  absl::Status status = RunGradient(grad);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("embedding_grad: id 6 at ids[1, 0] is outside [0, 6)"));

  OpCall negative("embedding_grad");
  negative.Attribute("row_offset", IntAttribute(2))
      .Input(Int32Tensor({2}, {3, -1}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3});
  status = RunGradient(negative);
  EXPECT_THAT(status.message(), HasSubstr("embedding_grad: id -1 at ids[1] is outside [0, inf)"));

  OpCall whole("embedding_grad");
  whole.Input(Int32Tensor({2}, {1, 2})).Input(MakeTensor({2, 3})).Output({2, 3});
  status = RunGradient(whole);
  EXPECT_THAT(status.message(), HasSubstr("embedding_grad: id 2 at ids[1] is outside [0, 2)"));
}

TEST(EmbeddingGradKernelTest, RejectsBadConfigurations) {
  OpCall ids("embedding_grad");
  ids.Input(MakeTensor({2})).Input(MakeTensor({2, 3})).Output({4, 3});
  absl::Status status = BuildGradient(ids).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("embedding_grad: input 'ids' must be int32 or int64, got float32"));

  OpCall dy("embedding_grad");
  dy.Input(Int32Tensor({2}, {0, 1})).Input(MakeTensor({2, 4})).Output({4, 3});
  status = BuildGradient(dy).status();
  EXPECT_THAT(status.message(), HasSubstr("embedding_grad: input 'dy' has shape [2, 4] but ids "
                                          "[2] of table [4, 3] give [2, 3]"));

  OpCall rank("embedding_grad");
  rank.Input(Int32Tensor({2}, {0, 1})).Input(MakeTensor({2, 3})).Output({12});
  status = BuildGradient(rank).status();
  EXPECT_THAT(
      status.message(),
      HasSubstr("embedding_grad: output 'dtable' must have rank 2 [rows, width], got [12]"));

  OpCall offset("embedding_grad");
  offset.Attribute("row_offset", IntAttribute(-1))
      .Input(Int32Tensor({2}, {0, 1}))
      .Input(MakeTensor({2, 3}))
      .Output({4, 3});
  status = BuildGradient(offset).status();
  EXPECT_THAT(status.message(),
              HasSubstr("embedding_grad: attribute 'row_offset' must be >= 0, got -1"));

  OpCall logical("embedding_grad");
  logical.Attribute("logical_rows", FloatAttribute(4.0))
      .Input(Int32Tensor({2}, {0, 1}))
      .Input(MakeTensor({2, 3}))
      .Output({4, 3});
  status = BuildGradient(logical).status();
  EXPECT_THAT(status.message(),
              HasSubstr("embedding_grad: attribute 'logical_rows' must be an integer"));
}

}  // namespace
}  // namespace loom::kernel_test
