#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Row `id` of a [rows, width] table, or zeros when the id is outside [first, first + rows).
std::vector<float> ReferenceLookup(const std::vector<float>& table, int64_t width, int64_t first,
                                   int64_t rows, const std::vector<int64_t>& ids) {
  std::vector<float> output;
  for (int64_t id : ids) {
    for (int64_t column = 0; column < width; ++column) {
      const int64_t local = id - first;
      output.push_back(local >= 0 && local < rows ? table[local * width + column] : 0.0f);
    }
  }
  return output;
}

TEST(EmbeddingKernelTest, LooksUpRowsWithInt32AndInt64Ids) {
  const std::vector<float> table = RandomFloats(5 * 3, 51);
  const std::vector<int64_t> ids = {0, 4, 2, 2, 1, 3};
  const std::vector<float> expected = ReferenceLookup(table, 3, 0, 5, ids);

  OpCall narrow("embedding");
  narrow.Input(FloatTensor({5, 3}, table))
      .Input(Int32Tensor({2, 3}, std::vector<int32_t>(ids.begin(), ids.end())))
      .Output({2, 3, 3});
  absl::Status status = narrow.Run();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(narrow.OutputFloats(), expected);

  OpCall wide("embedding");
  wide.Input(FloatTensor({5, 3}, table)).Input(Int64Tensor({6}, ids)).Output({6, 3});
  status = wide.Run();
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(wide.OutputFloats(), expected);
}

TEST(EmbeddingKernelTest, VocabParallelPartsSumToFullLookup) {
  const int64_t rows = 10;
  const int64_t width = 4;
  const std::vector<float> full = RandomFloats(rows * width, 52);
  const std::vector<int64_t> ids = {9, 0, 3, 4, 5, 7, 2, 6};
  const std::vector<float> expected = ReferenceLookup(full, width, 0, rows, ids);
  // Even and uneven splits of the vocabulary.
  for (const std::vector<int64_t>& bounds :
       std::vector<std::vector<int64_t>>{{0, 5, 10}, {0, 4, 10}, {0, 1, 7, 10}}) {
    std::vector<float> sum(expected.size(), 0.0f);
    for (size_t part = 0; part + 1 < bounds.size(); ++part) {
      const int64_t first = bounds[part];
      const int64_t count = bounds[part + 1] - first;
      const std::vector<float> shard(full.begin() + first * width,
                                     full.begin() + (first + count) * width);
      OpCall call("embedding");
      call.Attribute("row_offset", IntAttribute(first))
          .Attribute("logical_rows", IntAttribute(rows))
          .Input(FloatTensor({count, width}, shard))
          .Input(Int64Tensor({2, 4}, ids))
          .Output({2, 4, width});
      // Stale output must be overwritten, zeros included.
      for (std::byte& byte : call.output(0).bytes) byte = std::byte{0x3f};
      absl::Status status = call.Run();
      ASSERT_TRUE(status.ok()) << status;
      const std::vector<float> partial = call.OutputFloats();
      EXPECT_EQ(partial, ReferenceLookup(shard, width, first, count, ids)) << "part " << part;
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += partial[i];
    }
    EXPECT_EQ(sum, expected);
  }
}

TEST(EmbeddingKernelTest, OffsetWithoutLogicalRowsGivesZerosAboveTheShard) {
  OpCall call("embedding");
  call.Attribute("row_offset", IntAttribute(2))
      .Input(FloatTensor({2, 1}, {20, 30}))
      .Input(Int32Tensor({4}, {0, 2, 3, 1000}))
      .Output({4, 1});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(), ::testing::ElementsAre(0, 20, 30, 0));
}

TEST(EmbeddingKernelTest, RejectsIdsOutsideTheLogicalTable) {
  OpCall whole("embedding", "embed");
  whole.Input(MakeTensor({5, 3})).Input(Int32Tensor({2, 2}, {0, 1, 5, 2})).Output({2, 2, 3});
  absl::Status status = whole.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "embedding: id 5 at ids[1, 0] is outside [0, 5)");

  OpCall negative("embedding");
  negative.Input(MakeTensor({5, 3})).Input(Int64Tensor({3}, {0, -1, 2})).Output({3, 3});
  EXPECT_EQ(negative.Run().message(), "embedding: id -1 at ids[1] is outside [0, 5)");

  OpCall logical("embedding");
  logical.Attribute("row_offset", IntAttribute(5))
      .Attribute("logical_rows", IntAttribute(10))
      .Input(MakeTensor({5, 3}))
      .Input(Int64Tensor({3}, {9, 10, 2}))
      .Output({3, 3});
  EXPECT_EQ(logical.Run().message(), "embedding: id 10 at ids[1] is outside [0, 10)");

  OpCall unknown("embedding");
  unknown.Attribute("row_offset", IntAttribute(5))
      .Input(MakeTensor({5, 3}))
      .Input(Int64Tensor({1}, {-3}))
      .Output({1, 3});
  EXPECT_EQ(unknown.Run().message(), "embedding: id -3 at ids[0] is outside [0, inf)");
}

TEST(EmbeddingKernelTest, RejectsBadConfigurations) {
  OpCall id_type("embedding");
  id_type.Input(MakeTensor({5, 3})).Input(MakeTensor({2})).Output({2, 3});
  absl::Status status = id_type.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("embedding: input 'ids' must be int32 or int64, got float32"));

  OpCall table_type("embedding");
  table_type.Input(MakeTensor({5, 3}, plan::INT32))
      .Input(MakeTensor({2}, plan::INT32))
      .Output({2, 3});
  EXPECT_THAT(table_type.Build().status().message(),
              HasSubstr("embedding: input 'table' must be float32, got int32"));

  OpCall shape("embedding");
  shape.Input(MakeTensor({5, 3})).Input(MakeTensor({2, 2}, plan::INT64)).Output({4, 3});
  EXPECT_THAT(shape.Build().status().message(),
              HasSubstr("embedding: output has shape [4, 3] but ids [2, 2] of table [5, 3] give "
                        "[2, 2, 3]"));

  OpCall rank("embedding");
  rank.Input(MakeTensor({15})).Input(MakeTensor({2}, plan::INT64)).Output({2, 3});
  EXPECT_THAT(rank.Build().status().message(),
              HasSubstr("embedding: input 'table' must have rank 2 [rows, width], got [15]"));

  OpCall offset("embedding");
  offset.Attribute("row_offset", IntAttribute(-1))
      .Input(MakeTensor({5, 3}))
      .Input(MakeTensor({2}, plan::INT64))
      .Output({2, 3});
  EXPECT_THAT(offset.Build().status().message(),
              HasSubstr("embedding: attribute 'row_offset' must be >= 0, got -1"));
}

}  // namespace
}  // namespace loom::kernel_test
