#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom {
namespace {

using kernel_test::FloatTensor;
using kernel_test::OpCall;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(FlatPackKernelsTest, PackThenUnpackGivesThePartsBack) {
  OpCall pack("pack_flat");
  pack.Input(FloatTensor({2, 2}, {1, 2, 3, 4})).Input(FloatTensor({3}, {5, 6, 7})).Output({7});
  ASSERT_TRUE(pack.Run().ok());
  EXPECT_THAT(pack.OutputFloats(), ElementsAre(1, 2, 3, 4, 5, 6, 7));

  OpCall unpack("unpack_flat");
  unpack.Input(FloatTensor({7}, {1, 2, 3, 4, 5, 6, 7})).Output({3}).Output({2, 2});
  ASSERT_TRUE(unpack.Run().ok());
  EXPECT_THAT(unpack.OutputFloats(0), ElementsAre(1, 2, 3));
  EXPECT_THAT(unpack.OutputFloats(1), ElementsAre(4, 5, 6, 7));
}

// pack_shards: shard 0 (the first half along axis 0) of every part, then shard 1 of every part;
// a reduce-scatter over two ranks then leaves rank r its shard of each, as unpack_flat splits it.
TEST(FlatPackKernelsTest, PackShardsPutsEachRanksShardsTogether) {
  OpCall pack("pack_shards");
  pack.Attribute("shards", kernel_test::IntAttribute(2))
      .Input(FloatTensor({2, 2}, {1, 2, 3, 4}))
      .Input(FloatTensor({4}, {5, 6, 7, 8}))
      .Output({8});
  ASSERT_TRUE(pack.Run().ok());
  EXPECT_THAT(pack.OutputFloats(), ElementsAre(1, 2, 5, 6, 3, 4, 7, 8));

  OpCall uneven("pack_shards", "bucket");
  uneven.Attribute("shards", kernel_test::IntAttribute(2))
      .Input(FloatTensor({3}, {1, 2, 3}))
      .Output({3});
  absl::Status status = uneven.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("whose axis 0 is not split in 2 shards"));
  OpCall unsaid("pack_shards", "bucket");
  unsaid.Input(FloatTensor({2}, {1, 2})).Output({2});
  EXPECT_THAT(unsaid.Build().status().message(), HasSubstr("\"shards\" >= 1"));
}

// unpack_shards: the inverse of pack_shards, what an all-gather of each rank's packed shards makes
// back into whole tensors.
TEST(FlatPackKernelsTest, UnpackShardsInvertsPackShards) {
  OpCall unpack("unpack_shards");
  unpack.Attribute("shards", kernel_test::IntAttribute(2))
      .Input(FloatTensor({8}, {1, 2, 5, 6, 3, 4, 7, 8}))
      .Output({2, 2})
      .Output({4});
  ASSERT_TRUE(unpack.Run().ok());
  EXPECT_THAT(unpack.OutputFloats(0), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(unpack.OutputFloats(1), ElementsAre(5, 6, 7, 8));

  OpCall uneven("unpack_shards", "bucket");
  uneven.Attribute("shards", kernel_test::IntAttribute(3))
      .Input(FloatTensor({4}, {1, 2, 3, 4}))
      .Output({4});
  EXPECT_THAT(uneven.Build().status().message(),
              HasSubstr("unpack_shards: a part is [4], whose axis 0 is not split in 3 shards"));
}

TEST(FlatPackKernelsTest, SizesAndTypesThatDoNotAddUpAreRefused) {
  OpCall short_flat("pack_flat", "bucket");
  short_flat.Input(FloatTensor({2}, {1, 2})).Input(FloatTensor({2}, {3, 4})).Output({3});
  absl::Status status = short_flat.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("task 'bucket': pack_flat: the flat tensor is [3], not [4]"));

  OpCall mixed("unpack_flat", "bucket");
  mixed.Input(FloatTensor({4}, {1, 2, 3, 4})).Output({2}).Output({2}, plan::INT32);
  status = mixed.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("a part is"));

  OpCall nothing("unpack_flat", "bucket");
  nothing.Input(FloatTensor({4}, {1, 2, 3, 4}));
  EXPECT_EQ(nothing.Build().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom
