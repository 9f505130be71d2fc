#include <cmath>
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

struct LayerNormReference {
  std::vector<double> y;
  std::vector<double> mean;
  std::vector<double> rstd;
};

// PyTorch's LayerNorm over rows of `n`, with the biased variance, in double.
LayerNormReference ReferenceLayerNorm(const std::vector<float>& x, const std::vector<float>& gamma,
                                      const std::vector<float>& beta, int64_t n, double epsilon) {
  LayerNormReference result;
  result.y.resize(x.size());
  for (size_t start = 0; start < x.size(); start += n) {
    double mean = 0.0;
    for (int64_t i = 0; i < n; ++i) mean += x[start + i];
    mean /= n;
    double variance = 0.0;
    for (int64_t i = 0; i < n; ++i) variance += (x[start + i] - mean) * (x[start + i] - mean);
    variance /= n;
    const double rstd = 1.0 / std::sqrt(variance + epsilon);
    for (int64_t i = 0; i < n; ++i) {
      result.y[start + i] = (x[start + i] - mean) * rstd * gamma[i] + beta[i];
    }
    result.mean.push_back(mean);
    result.rstd.push_back(rstd);
  }
  return result;
}

TEST(LayerNormKernelTest, MatchesDoubleReference) {
  const Shape shape({3, 4, 10});
  // An offset and a spread, so that the mean matters.
  const std::vector<float> x = RandomFloats(shape.NumElements(), 31, 2.0f, 8.0f);
  const std::vector<float> gamma = RandomFloats(10, 32, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(10, 33);
  const LayerNormReference expected = ReferenceLayerNorm(x, gamma, beta, 10, 1e-5);
  OpCall call("layer_norm");
  call.Input(FloatTensor(shape, x))
      .Input(FloatTensor({10}, gamma))
      .Input(FloatTensor({10}, beta))
      .Output(shape);
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<float> y = call.OutputFloats();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected.y[i], 2e-6) << i;
}

TEST(LayerNormKernelTest, WritesMeanAndRstdWithThreeOutputs) {
  const Shape shape({5, 7});
  const std::vector<float> x = RandomFloats(shape.NumElements(), 41, -3.0f, 1.0f);
  const std::vector<float> gamma = RandomFloats(7, 42);
  const std::vector<float> beta = RandomFloats(7, 43);
  const LayerNormReference expected = ReferenceLayerNorm(x, gamma, beta, 7, 0.1);
  OpCall call("layer_norm");
  call.Attribute("epsilon", FloatAttribute(0.1))
      .Input(FloatTensor(shape, x))
      .Input(FloatTensor({7}, gamma))
      .Input(FloatTensor({7}, beta))
      .Output(shape)
      .Output({5})
      .Output({5});
  absl::Status status = call.Run();
  ASSERT_TRUE(status.ok()) << status;
  const std::vector<float> y = call.OutputFloats(0);
  const std::vector<float> mean = call.OutputFloats(1);
  const std::vector<float> rstd = call.OutputFloats(2);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], expected.y[i], 2e-6) << i;
  for (int row = 0; row < 5; ++row) {
    EXPECT_NEAR(mean[row], expected.mean[row], 1e-6) << row;
    EXPECT_NEAR(rstd[row], expected.rstd[row], 1e-6 * expected.rstd[row]) << row;
  }
}

TEST(LayerNormKernelTest, ConstantRowsGiveBeta) {
  OpCall call("layer_norm");
  call.Input(FloatTensor({2, 3}, {4, 4, 4, -1, -1, -1}))
      .Input(FloatTensor({3}, {2, 2, 2}))
      .Input(FloatTensor({3}, {0.5f, 1.5f, -2}))
      .Output({2, 3})
      .Output({2})
      .Output({2});
  ASSERT_TRUE(call.Run().ok());
  EXPECT_THAT(call.OutputFloats(0), ::testing::ElementsAre(0.5f, 1.5f, -2, 0.5f, 1.5f, -2));
  EXPECT_THAT(call.OutputFloats(1), ::testing::ElementsAre(4, -1));
  EXPECT_NEAR(call.OutputFloats(2)[0], 1.0 / std::sqrt(1e-5), 1e-2);
}

TEST(LayerNormKernelTest, RejectsBadConfigurations) {
  OpCall gamma("layer_norm");
  gamma.Input(MakeTensor({2, 4})).Input(MakeTensor({3})).Input(MakeTensor({4})).Output({2, 4});
  absl::Status status = gamma.Build().status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("layer_norm: gamma has shape [3] but the last axis of x has shape [4]"));

  OpCall statistics("layer_norm");
  statistics.Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4})
      .Output({2, 1})
      .Output({2});
  EXPECT_THAT(statistics.Build().status().message(),
              HasSubstr("layer_norm: output mean has shape [2, 1] but x without its last axis "
                        "has shape [2]"));

  OpCall two_outputs("layer_norm");
  two_outputs.Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4})
      .Output({2});
  EXPECT_THAT(two_outputs.Build().status().message(),
              HasSubstr("layer_norm: expects 3 inputs (x, gamma, beta) and 1 or 3 outputs "
                        "(y[, mean, rstd]), got 3 inputs and 2 outputs"));

  OpCall epsilon("layer_norm");
  epsilon.Attribute("epsilon", FloatAttribute(-1.0))
      .Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}))
      .Input(MakeTensor({4}))
      .Output({2, 4});
  EXPECT_THAT(epsilon.Build().status().message(),
              HasSubstr("layer_norm: attribute 'epsilon' must be finite and >= 0, got -1"));

  OpCall data_type("layer_norm");
  data_type.Input(MakeTensor({2, 4}))
      .Input(MakeTensor({4}, plan::INT32))
      .Input(MakeTensor({4}))
      .Output({2, 4});
  EXPECT_THAT(data_type.Build().status().message(),
              HasSubstr("layer_norm: input 1 must be float32, got int32"));
}

}  // namespace
}  // namespace loom::kernel_test
