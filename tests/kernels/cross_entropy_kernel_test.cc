#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// logsumexp(row) - row[label] in double, or 0 for `ignore_index`.
std::vector<double> ReferenceLoss(const std::vector<float>& logits, int64_t classes,
                                  const std::vector<int64_t>& labels, int64_t ignore_index) {
  std::vector<double> loss;
  for (size_t sample = 0; sample < labels.size(); ++sample) {
    if (labels[sample] == ignore_index) {
      loss.push_back(0.0);
      continue;
    }
    const float* row = logits.data() + sample * classes;
    double maximum = row[0];
    for (int64_t i = 0; i < classes; ++i) maximum = std::max<double>(maximum, row[i]);
    double sum = 0.0;
    for (int64_t i = 0; i < classes; ++i) sum += std::exp(row[i] - maximum);
    loss.push_back(maximum + std::log(sum) - row[labels[sample]]);
  }
  return loss;
}

TEST(SparseCrossEntropyKernelTest, MatchesLogSumExpWithBothLabelTypes) {
  const Shape shape({2, 3, 7});
  const std::vector<float> logits = RandomFloats(shape.NumElements(), 61, -4.0f, 4.0f);
  const std::vector<int64_t> labels = {0, 6, 3, 3, 1, 5};
  const std::vector<double> expected = ReferenceLoss(logits, 7, labels, -100);

  OpCall narrow("sparse_cross_entropy");
  narrow.Input(FloatTensor(shape, logits))
      .Input(Int32Tensor({2, 3}, std::vector<int32_t>(labels.begin(), labels.end())))
      .Output({2, 3});
  absl::Status status = narrow.Run();
  ASSERT_TRUE(status.ok()) << status;

  OpCall wide("sparse_cross_entropy");
  wide.Input(FloatTensor(shape, logits)).Input(Int64Tensor({2, 3}, labels)).Output({2, 3});
  status = wide.Run();
  ASSERT_TRUE(status.ok()) << status;

  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_NEAR(narrow.OutputFloats()[i], expected[i], 1e-6 * (1.0 + expected[i])) << i;
    EXPECT_NEAR(wide.OutputFloats()[i], expected[i], 1e-6 * (1.0 + expected[i])) << i;
  }
}

TEST(SparseCrossEntropyKernelTest, StableWithLargeLogits) {
  OpCall call("sparse_cross_entropy");
  call.Input(FloatTensor({2, 3}, {1000, 999, 998, -1000, -1001, 50000}))
      .Input(Int32Tensor({2}, {1, 0}))
      .Output({2});
  ASSERT_TRUE(call.Run().ok());
  const double log_sum = std::log(1.0 + std::exp(-1.0) + std::exp(-2.0));
  EXPECT_NEAR(call.OutputFloats()[0], 1.0 + log_sum, 1e-5);
  EXPECT_NEAR(call.OutputFloats()[1], 51000.0, 1e-2);
}

TEST(SparseCrossEntropyKernelTest, IgnoreIndexGivesZero) {
  const std::vector<float> logits = RandomFloats(4 * 5, 62);
  for (int64_t ignore_index : {-100, 2, -1}) {
    const std::vector<int64_t> labels = {ignore_index, 4, ignore_index, 0};
    const std::vector<double> expected = ReferenceLoss(logits, 5, labels, ignore_index);
    OpCall call("sparse_cross_entropy");
    if (ignore_index != -100) call.Attribute("ignore_index", IntAttribute(ignore_index));
    call.Input(FloatTensor({4, 5}, logits)).Input(Int64Tensor({4}, labels)).Output({4});
    absl::Status status = call.Run();
    ASSERT_TRUE(status.ok()) << status;
    const std::vector<float> loss = call.OutputFloats();
    EXPECT_EQ(loss[0], 0.0f);
    EXPECT_EQ(loss[2], 0.0f);
    EXPECT_NEAR(loss[1], expected[1], 1e-6);
    EXPECT_NEAR(loss[3], expected[3], 1e-6);
  }
}

TEST(SparseCrossEntropyKernelTest, RejectsLabelsOutOfRange) {
  OpCall high("sparse_cross_entropy");
  high.Input(MakeTensor({2, 3, 7})).Input(Int32Tensor({2, 3}, {0, 1, 2, 3, 7, 0})).Output({2, 3});
  absl::Status status = high.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "sparse_cross_entropy: label 7 at labels[1, 1] is outside [0, 7) (ignore_index is "
            "-100)");

  OpCall negative("sparse_cross_entropy");
  negative.Input(MakeTensor({3, 4})).Input(Int64Tensor({3}, {0, -1, 2})).Output({3});
  EXPECT_THAT(negative.Run().message(), HasSubstr("label -1 at labels[1] is outside [0, 4)"));
}

TEST(SparseCrossEntropyKernelTest, RejectsBadConfigurations) {
  OpCall label_type("sparse_cross_entropy");
  label_type.Input(MakeTensor({3, 4})).Input(MakeTensor({3})).Output({3});
  absl::Status status = label_type.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(
      status.message(),
      HasSubstr("sparse_cross_entropy: input 'labels' must be int32 or int64, got float32"));

  OpCall labels("sparse_cross_entropy");
  labels.Input(MakeTensor({3, 4})).Input(MakeTensor({4}, plan::INT32)).Output({4});
  EXPECT_THAT(labels.Build().status().message(),
              HasSubstr("sparse_cross_entropy: labels has shape [4] but logits without its last "
                        "axis has shape [3]"));

  OpCall output("sparse_cross_entropy");
  output.Input(MakeTensor({3, 4})).Input(MakeTensor({3}, plan::INT32)).Output({3, 1});
  EXPECT_THAT(output.Build().status().message(),
              HasSubstr("sparse_cross_entropy: output has shape [3, 1] but labels has shape [3]"));

  OpCall logits_type("sparse_cross_entropy");
  logits_type.Input(MakeTensor({3, 4}, plan::INT32))
      .Input(MakeTensor({3}, plan::INT32))
      .Output({3});
  EXPECT_THAT(logits_type.Build().status().message(),
              HasSubstr("sparse_cross_entropy: input 'logits' must be float32, got int32"));
}

}  // namespace
}  // namespace loom::kernel_test
