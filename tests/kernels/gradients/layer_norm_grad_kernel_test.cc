#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// Checks layer_norm_grad against central differences of layer_norm with respect to x, gamma and
// beta; `epsilon` < 0 leaves the attribute out (the default 1e-5).
void ExpectLayerNormGradMatches(const Shape& shape, double epsilon) {
  const int64_t n = shape.dimension(shape.rank() - 1);
  const std::vector<float> x = RandomFloats(shape.NumElements(), 51, -1.0f, 5.0f);
  const std::vector<float> gamma = RandomFloats(n, 52, 0.5f, 1.5f);
  const std::vector<float> beta = RandomFloats(n, 53);
  const std::vector<float> dy = RandomFloats(shape.NumElements(), 54, -2.0f, 2.0f);
  OpCall forward("layer_norm");
  if (epsilon >= 0.0) forward.Attribute("epsilon", FloatAttribute(epsilon));
  forward.Input(FloatTensor(shape, x))
      .Input(FloatTensor({n}, gamma))
      .Input(FloatTensor({n}, beta))
      .Output(shape);
  std::vector<std::vector<double>> numeric;
  for (int input = 0; input < 3; ++input) {
    absl::StatusOr<std::vector<double>> gradient = NumericGradient(forward, input, {dy});
    ASSERT_TRUE(gradient.ok()) << gradient.status();
    numeric.push_back(*gradient);
  }

  OpCall grad("layer_norm_grad");
  if (epsilon >= 0.0) grad.Attribute("epsilon", FloatAttribute(epsilon));
  grad.Input(FloatTensor(shape, x))
      .Input(FloatTensor({n}, gamma))
      .Input(FloatTensor(shape, dy))
      .Output(shape)
      .Output({n})
      .Output({n});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(0), numeric[0], "dx");
  ExpectGradientNear(grad.OutputFloats(1), numeric[1], "dgamma");
  ExpectGradientNear(grad.OutputFloats(2), numeric[2], "dbeta");
}

TEST(LayerNormGradKernelTest, MatchesFiniteDifferences) {
  ExpectLayerNormGradMatches(Shape({2, 3, 8}), /*epsilon=*/-1.0);
}

TEST(LayerNormGradKernelTest, UsesEpsilon) {
  // A large epsilon changes the gradient noticeably.
  ExpectLayerNormGradMatches(Shape({4, 5}), /*epsilon=*/0.5);
}

TEST(LayerNormGradKernelTest, OneRow) { ExpectLayerNormGradMatches(Shape({6}), -1.0); }

TEST(LayerNormGradKernelTest, ParameterGradientsAreSumsOverTheLocalRows) {
  // Two slices of the rows give dgamma and dbeta that add up to those of all the rows.
  const Shape shape({4, 3});
  const std::vector<float> x = RandomFloats(12, 61, -2.0f, 2.0f);
  const std::vector<float> gamma = RandomFloats(3, 62);
  const std::vector<float> dy = RandomFloats(12, 63);
  auto run = [&](int64_t first_row, int64_t rows) {
    const auto begin = static_cast<std::ptrdiff_t>(first_row * 3);
    const auto end = static_cast<std::ptrdiff_t>((first_row + rows) * 3);
    OpCall grad("layer_norm_grad");
    grad.Input(FloatTensor({rows, 3}, std::vector<float>(x.begin() + begin, x.begin() + end)))
        .Input(FloatTensor({3}, gamma))
        .Input(FloatTensor({rows, 3}, std::vector<float>(dy.begin() + begin, dy.begin() + end)))
        .Output({rows, 3})
        .Output({3})
        .Output({3});
    absl::Status status = RunGradient(grad);
    EXPECT_TRUE(status.ok()) << status;
    return std::vector<std::vector<float>>{grad.OutputFloats(1), grad.OutputFloats(2)};
  };
  const auto all = run(0, 4);
  const auto top = run(0, 1);
  const auto bottom = run(1, 3);
  for (int output = 0; output < 2; ++output) {
    for (int i = 0; i < 3; ++i) {
      EXPECT_NEAR(all[output][i], top[output][i] + bottom[output][i], 1e-5) << output << " " << i;
    }
  }
}

TEST(LayerNormGradKernelTest, NoRowsGivesZeroParameterGradients) {
  OpCall grad("layer_norm_grad");
  grad.Input(MakeTensor({0, 3}))
      .Input(FloatTensor({3}, {1.0f, 2.0f, 3.0f}))
      .Input(MakeTensor({0, 3}))
      .Output({0, 3})
      .Output({3})
      .Output({3});
  // Stale values, which must be overwritten.
  grad.output(1) = FloatTensor({3}, {7.0f, 7.0f, 7.0f});
  grad.output(2) = FloatTensor({3}, {7.0f, 7.0f, 7.0f});
  absl::Status status = RunGradient(grad);
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_THAT(grad.OutputFloats(1), ::testing::ElementsAre(0.0f, 0.0f, 0.0f));
  EXPECT_THAT(grad.OutputFloats(2), ::testing::ElementsAre(0.0f, 0.0f, 0.0f));
}

TEST(LayerNormGradKernelTest, RejectsBadConfigurations) {
  OpCall arity("layer_norm_grad");
  arity.Input(MakeTensor({2, 3})).Input(MakeTensor({3})).Input(MakeTensor({2, 3})).Output({2, 3});
  absl::Status status = BuildGradient(arity).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("layer_norm_grad: expects 3 inputs (x, gamma, dy) and 3 outputs (dx, "
                        "dgamma, dbeta), got 3 inputs and 1 output"));

  OpCall gamma("layer_norm_grad");
  gamma.Input(MakeTensor({2, 3}))
      .Input(MakeTensor({2}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({3});
  status = BuildGradient(gamma).status();
  EXPECT_THAT(status.message(), HasSubstr("layer_norm_grad: input 'gamma' has shape [2] but the "
                                          "last axis of x has shape [3]"));

  OpCall dbeta("layer_norm_grad");
  dbeta.Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({2, 3});
  status = BuildGradient(dbeta).status();
  EXPECT_THAT(status.message(), HasSubstr("output 'dbeta' has shape [2, 3]"));

  OpCall epsilon("layer_norm_grad");
  epsilon.Attribute("epsilon", FloatAttribute(-1.0))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({3});
  status = BuildGradient(epsilon).status();
  EXPECT_THAT(status.message(),
              HasSubstr("layer_norm_grad: attribute 'epsilon' must be finite and >= 0, got -1"));

  OpCall type("layer_norm_grad");
  type.Attribute("epsilon", StringAttribute("small"))
      .Input(MakeTensor({2, 3}))
      .Input(MakeTensor({3}))
      .Input(MakeTensor({2, 3}))
      .Output({2, 3})
      .Output({3})
      .Output({3});
  status = BuildGradient(type).status();
  EXPECT_THAT(status.message(), HasSubstr("layer_norm_grad: attribute 'epsilon' must be a number"));
}

}  // namespace
}  // namespace loom::kernel_test
