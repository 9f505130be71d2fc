#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/optimizers/golden_values.h"
#include "tests/kernels/optimizers/optimizer_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

struct AdamWConfig {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weight_decay = 0.01;
};

// For gtest's names of parameterized cases (it would otherwise print the bytes).
void PrintTo(const AdamWConfig& config, std::ostream* os) {
  *os << "lr " << config.lr << ", betas (" << config.beta1 << ", " << config.beta2 << "), epsilon "
      << config.epsilon << ", weight_decay " << config.weight_decay;
}

void DescribeAdamW(OpCall& call, const Shape& shape, const AdamWConfig& config) {
  call.Attribute("lr", FloatAttribute(config.lr))
      .Attribute("beta1", FloatAttribute(config.beta1))
      .Attribute("beta2", FloatAttribute(config.beta2))
      .Attribute("epsilon", FloatAttribute(config.epsilon))
      .Attribute("weight_decay", FloatAttribute(config.weight_decay));
  DeclareTensors(call, shape, 4, 3);
}

// torch.optim.AdamW's documented algorithm (amsgrad off) in double, written independently of the
// kernel. Returns param, exp_avg and exp_avg_sq after each step; step t = piece + 1.
std::vector<std::vector<std::vector<double>>> ReferenceAdamW(
    const AdamWConfig& config, const std::vector<std::vector<float>>& initial,
    const std::vector<std::vector<float>>& grads, int64_t first_piece = 0) {
  std::vector<double> param(initial[0].begin(), initial[0].end());
  std::vector<double> m(initial[1].begin(), initial[1].end());
  std::vector<double> v(initial[2].begin(), initial[2].end());
  std::vector<std::vector<std::vector<double>>> steps;
  for (size_t step = 0; step < grads.size(); ++step) {
    const double t = static_cast<double>(first_piece + static_cast<int64_t>(step) + 1);
    const double m_correction = 1.0 - std::pow(config.beta1, t);
    const double v_correction = 1.0 - std::pow(config.beta2, t);
    for (size_t i = 0; i < param.size(); ++i) {
      const double g = grads[step][i];
      param[i] -= config.lr * config.weight_decay * param[i];
      m[i] = config.beta1 * m[i] + (1.0 - config.beta1) * g;
      v[i] = config.beta2 * v[i] + (1.0 - config.beta2) * g * g;
      const double m_hat = m[i] / m_correction;
      const double v_hat = v[i] / v_correction;
      // The paper's bias-corrected form; PyTorch's lr / m_correction * m /
      // (sqrt(v) / sqrt(v_correction) + epsilon) is the same in exact arithmetic.
      param[i] -= config.lr * m_hat / (std::sqrt(v_hat) + config.epsilon);
    }
    steps.push_back({param, m, v});
  }
  return steps;
}

std::vector<std::vector<float>> GoldenRows(absl::Span<const float> values) {
  std::vector<std::vector<float>> rows;
  for (int64_t row = 0; row < 3; ++row) rows.push_back(GoldenRow(values, 6, row));
  return rows;
}

struct GoldenCase {
  const char* name;
  AdamWConfig config;
  absl::Span<const float> param;
  absl::Span<const float> grads;
  absl::Span<const float> param_steps;
  absl::Span<const float> exp_avg_steps;
  absl::Span<const float> exp_avg_sq_steps;
};

std::vector<GoldenCase> GoldenCases() {
  return {
      {"default",
       {.lr = 1e-3},
       golden::kAdamWDefaultParam,
       golden::kAdamWDefaultGrads,
       golden::kAdamWDefaultParamSteps,
       golden::kAdamWDefaultExpAvgSteps,
       golden::kAdamWDefaultExpAvgSqSteps},
      {"fast",
       {.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .epsilon = 1e-6, .weight_decay = 0.1},
       golden::kAdamWFastParam,
       golden::kAdamWFastGrads,
       golden::kAdamWFastParamSteps,
       golden::kAdamWFastExpAvgSteps,
       golden::kAdamWFastExpAvgSqSteps},
      {"no decay",
       {.lr = 0.01, .beta1 = 0.5, .beta2 = 0.9, .epsilon = 1e-8, .weight_decay = 0.0},
       golden::kAdamWNoDecayParam,
       golden::kAdamWNoDecayGrads,
       golden::kAdamWNoDecayParamSteps,
       golden::kAdamWNoDecayExpAvgSteps,
       golden::kAdamWNoDecayExpAvgSqSteps},
  };
}

TEST(AdamWKernelTest, MatchesPyTorch) {
  // Exactly: the kernel performs PyTorch's float32 operations in its order, with its fused
  // multiply-adds, and its scalars in double as Python does.
  const Shape shape = {2, 3};
  for (const GoldenCase& golden_case : GoldenCases()) {
    for (bool in_place : {false, true}) {
      SCOPED_TRACE(testing::Message() << golden_case.name << (in_place ? ", in place" : ""));
      OpCall call("adamw");
      DescribeAdamW(call, shape, golden_case.config);
      absl::StatusOr<OptimizerSteps> steps =
          RunOptimizer(call, shape,
                       {GoldenRow(golden_case.param, 6, 0), std::vector<float>(6, 0.0f),
                        std::vector<float>(6, 0.0f)},
                       GoldenRows(golden_case.grads), in_place);
      ASSERT_TRUE(steps.ok()) << steps.status();
      ASSERT_EQ(steps->size(), 3u);
      for (int64_t step = 0; step < 3; ++step) {
        SCOPED_TRACE(testing::Message() << "step " << step + 1);
        EXPECT_THAT((*steps)[step][0],
                    ElementsAreArray(GoldenRow(golden_case.param_steps, 6, step)));
        EXPECT_THAT((*steps)[step][1],
                    ElementsAreArray(GoldenRow(golden_case.exp_avg_steps, 6, step)));
        EXPECT_THAT((*steps)[step][2],
                    ElementsAreArray(GoldenRow(golden_case.exp_avg_sq_steps, 6, step)));
      }
    }
  }
}

TEST(AdamWKernelTest, PyTorchGoldenValuesAgreeWithReference) {
  for (const GoldenCase& golden_case : GoldenCases()) {
    SCOPED_TRACE(golden_case.name);
    const auto steps = ReferenceAdamW(golden_case.config,
                                      {GoldenRow(golden_case.param, 6, 0),
                                       std::vector<float>(6, 0.0f), std::vector<float>(6, 0.0f)},
                                      GoldenRows(golden_case.grads));
    for (int64_t step = 0; step < 3; ++step) {
      for (int64_t i = 0; i < 6; ++i) {
        EXPECT_NEAR(steps[step][0][i], golden_case.param_steps[step * 6 + i], 1e-6);
        EXPECT_NEAR(steps[step][1][i], golden_case.exp_avg_steps[step * 6 + i], 1e-6);
        EXPECT_NEAR(steps[step][2][i], golden_case.exp_avg_sq_steps[step * 6 + i], 1e-6);
      }
    }
  }
}

TEST(AdamWKernelTest, DefaultsAreThoseOfPyTorch) {
  // Only lr given: beta1 0.9, beta2 0.999, epsilon 1e-8 and weight_decay 0.01, as the golden case.
  const Shape shape = {2, 3};
  OpCall call("adamw");
  call.Attribute("lr", FloatAttribute(1e-3));
  DeclareTensors(call, shape, 4, 3);
  absl::StatusOr<OptimizerSteps> steps =
      RunOptimizer(call, shape,
                   {GoldenRow(golden::kAdamWDefaultParam, 6, 0), std::vector<float>(6, 0.0f),
                    std::vector<float>(6, 0.0f)},
                   GoldenRows(golden::kAdamWDefaultGrads), /*in_place=*/true);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT((*steps)[2][0], ElementsAreArray(GoldenRow(golden::kAdamWDefaultParamSteps, 6, 2)));
}

class AdamWReferenceTest : public ::testing::TestWithParam<AdamWConfig> {};

TEST_P(AdamWReferenceTest, MatchesDoubleReference) {
  const AdamWConfig& config = GetParam();
  const Shape shape = {5, 41};
  const int64_t count = shape.NumElements();
  // From the start, and resumed late in training (step 1000 on), where the bias corrections
  // are close to 1 and the incoming moments matter.
  for (int64_t first_piece : {0, 999}) {
    SCOPED_TRACE(testing::Message() << "first piece " << first_piece);
    std::vector<std::vector<float>> initial = {RandomFloats(count, 1), std::vector<float>(count),
                                               std::vector<float>(count)};
    if (first_piece > 0) {
      initial[1] = RandomFloats(count, 2, -0.5f, 0.5f);
      initial[2] = RandomFloats(count, 3, 0.01f, 1.0f);
    }
    std::vector<std::vector<float>> grads;
    for (uint32_t step = 0; step < 5; ++step)
      grads.push_back(RandomFloats(count, 10 + step, -2, 2));
    OpCall call("adamw");
    DescribeAdamW(call, shape, config);
    absl::StatusOr<OptimizerSteps> steps =
        RunOptimizer(call, shape, initial, grads, /*in_place=*/true, first_piece);
    ASSERT_TRUE(steps.ok()) << steps.status();
    const auto expected = ReferenceAdamW(config, initial, grads, first_piece);
    for (size_t step = 0; step < grads.size(); ++step) {
      for (int output = 0; output < 3; ++output) {
        for (int64_t i = 0; i < count; ++i) {
          const double want = expected[step][output][i];
          ASSERT_NEAR((*steps)[step][output][i], want, 2e-6 * (1.0 + std::abs(want)))
              << "step " << step + 1 << ", output " << output << ", element " << i;
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Configs, AdamWReferenceTest,
    ::testing::Values(
        AdamWConfig{}, AdamWConfig{.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .weight_decay = 0.1},
        AdamWConfig{.lr = 0.1, .beta1 = 0.0, .beta2 = 0.5, .epsilon = 1e-3, .weight_decay = 0.0},
        AdamWConfig{.lr = 3e-4, .beta1 = 0.95, .beta2 = 0.9999, .epsilon = 0.0}));

TEST(AdamWKernelTest, FirstStepMovesEachParameterByLr) {
  // At step 1 from zero moments, m_hat = g and v_hat = g * g, so the param moves by
  // lr * g / (|g| + epsilon), about lr against the sign of g.
  const Shape shape = {4};
  OpCall call("adamw");
  DescribeAdamW(call, shape, {.lr = 0.01, .weight_decay = 0.0});
  absl::StatusOr<OptimizerSteps> steps =
      RunOptimizer(call, shape, {{1.0f, 1.0f, 1.0f, 1.0f}, {0, 0, 0, 0}, {0, 0, 0, 0}},
                   {{3.0f, -0.5f, 100.0f, -1e-3f}}, /*in_place=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
  EXPECT_THAT((*steps)[0][0],
              ::testing::Pointwise(::testing::FloatNear(1e-6f), {0.99f, 1.01f, 0.99f, 1.01f}));
}

absl::Status BuildStatus(const OpCall& call) { return BuildOptimizerKernel(call).status(); }

TEST(AdamWKernelTest, RequiresLearningRate) {
  OpCall call("adamw", "adam_task");
  DeclareTensors(call, {2, 3}, 4, 3);
  absl::Status status = BuildStatus(call);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "task 'adam_task' (op 'adamw'): adamw: missing attribute 'lr'");
}

TEST(AdamWKernelTest, RejectsBadShapesAndArity) {
  OpCall bad_state("adamw", "adam_task");
  bad_state.Attribute("lr", FloatAttribute(1e-3));
  bad_state.Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3})).Input(MakeTensor({2, 3}));
  bad_state.Input(MakeTensor({6}));
  bad_state.Output({2, 3}).Output({2, 3}).Output({2, 3});
  absl::Status status = BuildStatus(bad_state);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "task 'adam_task' (op 'adamw'): adamw: input 'exp_avg_sq' has shape [6] but input "
            "'param' has shape [2, 3]");

  OpCall bad_output("adamw");
  bad_output.Attribute("lr", FloatAttribute(1e-3));
  DeclareTensors(bad_output, {6}, 4, 1);
  bad_output.Output({6, 1}).Output({6});
  EXPECT_THAT(BuildStatus(bad_output).message(),
              HasSubstr("adamw: output 'exp_avg_out' has shape [6, 1] but input 'param' has "
                        "shape [6]"));

  OpCall missing_output("adamw");
  missing_output.Attribute("lr", FloatAttribute(1e-3));
  DeclareTensors(missing_output, {6}, 4, 2);
  EXPECT_THAT(BuildStatus(missing_output).message(),
              HasSubstr("adamw: expects 4 inputs and 3 outputs, got 4 inputs and 2 outputs"));

  OpCall integer_grad("adamw");
  integer_grad.Attribute("lr", FloatAttribute(1e-3));
  integer_grad.Input(MakeTensor({6})).Input(MakeTensor({6}, plan::INT64));
  integer_grad.Input(MakeTensor({6})).Input(MakeTensor({6}));
  integer_grad.Output({6}).Output({6}).Output({6});
  EXPECT_THAT(BuildStatus(integer_grad).message(),
              HasSubstr("adamw: input 'grad' must be float32, got int64"));
}

TEST(AdamWKernelTest, RejectsBadAttributes) {
  struct Case {
    std::string name;
    plan::AttributeValue value;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"lr", FloatAttribute(-1e-3), "attribute 'lr' must be >= 0, got -0.001"},
      {"lr", FloatAttribute(std::numeric_limits<double>::quiet_NaN()),
       "attribute 'lr' must be finite, got nan"},
      {"beta1", FloatAttribute(1.0), "attribute 'beta1' must be in [0, 1), got 1"},
      {"beta1", FloatAttribute(-0.1), "attribute 'beta1' must be in [0, 1), got -0.1"},
      {"beta2", FloatAttribute(1.5), "attribute 'beta2' must be in [0, 1), got 1.5"},
      {"epsilon", FloatAttribute(-1e-8), "attribute 'epsilon' must be >= 0, got -1e-08"},
      {"weight_decay", FloatAttribute(-0.01), "attribute 'weight_decay' must be >= 0, got -0.01"},
      {"weight_decay", BoolAttribute(true),
       "attribute 'weight_decay' must be a number (float_value)"},
  };
  for (const Case& test_case : cases) {
    OpCall call("adamw", "adam_task");
    call.Attribute("lr", FloatAttribute(1e-3));
    call.Attribute(test_case.name, test_case.value);
    DeclareTensors(call, {4}, 4, 3);
    absl::Status status = BuildStatus(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "task 'adam_task' (op 'adamw'): adamw: " + test_case.message);
  }
}

TEST(AdamWKernelTest, ComputeRejectsNegativePiece) {
  OpCall call("adamw");
  DescribeAdamW(call, {4}, {});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildOptimizerKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  absl::Status status = call.Compute(**kernel, -3);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("adamw: the piece is the index of the training step"));
  EXPECT_TRUE(call.Compute(**kernel, 0).ok());
}

}  // namespace
}  // namespace loom::kernel_test
