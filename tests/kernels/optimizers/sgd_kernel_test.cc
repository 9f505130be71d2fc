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

struct SgdConfig {
  double lr = 0.1;
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
};

// For gtest's names of parameterized cases (it would otherwise print the bytes, padding included).
void PrintTo(const SgdConfig& config, std::ostream* os) {
  *os << "lr " << config.lr << ", momentum " << config.momentum << ", dampening "
      << config.dampening << ", weight_decay " << config.weight_decay
      << (config.nesterov ? ", nesterov" : "");
}

void DescribeSgd(OpCall& call, const Shape& shape, const SgdConfig& config) {
  call.Attribute("lr", FloatAttribute(config.lr))
      .Attribute("momentum", FloatAttribute(config.momentum))
      .Attribute("dampening", FloatAttribute(config.dampening))
      .Attribute("weight_decay", FloatAttribute(config.weight_decay))
      .Attribute("nesterov", BoolAttribute(config.nesterov));
  DeclareTensors(call, shape, 3, 2);
}

// torch.optim.SGD's documented algorithm in double, written independently of the kernel. Returns
// the param and momentum buffer after each step; `first_piece` 0 starts training (the buffer is
// then initialized from the gradient).
std::vector<std::vector<std::vector<double>>> ReferenceSgd(
    const SgdConfig& config, const std::vector<float>& initial_param,
    const std::vector<float>& initial_buffer, const std::vector<std::vector<float>>& grads,
    int64_t first_piece = 0) {
  std::vector<double> param(initial_param.begin(), initial_param.end());
  std::vector<double> buffer(initial_buffer.begin(), initial_buffer.end());
  std::vector<std::vector<std::vector<double>>> steps;
  for (size_t step = 0; step < grads.size(); ++step) {
    const bool first = first_piece + static_cast<int64_t>(step) == 0;
    for (size_t i = 0; i < param.size(); ++i) {
      double g = grads[step][i] + config.weight_decay * param[i];
      if (config.momentum != 0.0) {
        buffer[i] = first ? g : config.momentum * buffer[i] + (1.0 - config.dampening) * g;
        g = config.nesterov ? g + config.momentum * buffer[i] : buffer[i];
      }
      param[i] -= config.lr * g;
    }
    steps.push_back({param, buffer});
  }
  return steps;
}

std::vector<std::vector<float>> GoldenRows(absl::Span<const float> values) {
  std::vector<std::vector<float>> rows;
  for (int64_t row = 0; row < 3; ++row) rows.push_back(GoldenRow(values, 6, row));
  return rows;
}

// Runs the golden case and expects PyTorch's float32 results exactly: the kernel performs
// PyTorch's operations in its order, with its fused multiply-adds.
void ExpectMatchesPyTorch(const SgdConfig& config, absl::Span<const float> param,
                          absl::Span<const float> grads, absl::Span<const float> param_steps,
                          absl::Span<const float> buffer_steps) {
  const Shape shape = {2, 3};
  for (bool in_place : {false, true}) {
    SCOPED_TRACE(in_place ? "in place" : "separate outputs");
    OpCall call("sgd");
    DescribeSgd(call, shape, config);
    absl::StatusOr<OptimizerSteps> steps = RunOptimizer(
        call, shape, {std::vector<float>(param.begin(), param.end()), std::vector<float>(6, 0.0f)},
        GoldenRows(grads), in_place);
    ASSERT_TRUE(steps.ok()) << steps.status();
    ASSERT_EQ(steps->size(), 3u);
    for (int64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE(testing::Message() << "step " << step + 1);
      EXPECT_THAT((*steps)[step][0], ElementsAreArray(GoldenRow(param_steps, 6, step)));
      EXPECT_THAT((*steps)[step][1], ElementsAreArray(GoldenRow(buffer_steps, 6, step)));
    }
  }
}

TEST(SgdKernelTest, MatchesPyTorchWithMomentumAndWeightDecay) {
  ExpectMatchesPyTorch({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
                       golden::kSgdMomentumParam, golden::kSgdMomentumGrads,
                       golden::kSgdMomentumParamSteps, golden::kSgdMomentumMomentumBufferSteps);
}

TEST(SgdKernelTest, MatchesPyTorchWithNesterov) {
  ExpectMatchesPyTorch({.lr = 0.05, .momentum = 0.8, .weight_decay = 0.001, .nesterov = true},
                       golden::kSgdNesterovParam, golden::kSgdNesterovGrads,
                       golden::kSgdNesterovParamSteps, golden::kSgdNesterovMomentumBufferSteps);
}

TEST(SgdKernelTest, PyTorchGoldenValuesAgreeWithReference) {
  // The reference reproduces PyTorch's numbers up to float32 rounding, so both check each other.
  const auto steps =
      ReferenceSgd({.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 0.01},
                   GoldenRow(golden::kSgdMomentumParam, 6, 0), std::vector<float>(6, 0.0f),
                   GoldenRows(golden::kSgdMomentumGrads));
  for (int64_t step = 0; step < 3; ++step) {
    for (int64_t i = 0; i < 6; ++i) {
      EXPECT_NEAR(steps[step][0][i], golden::kSgdMomentumParamSteps[step * 6 + i], 1e-6);
      EXPECT_NEAR(steps[step][1][i], golden::kSgdMomentumMomentumBufferSteps[step * 6 + i], 1e-6);
    }
  }
}

class SgdReferenceTest : public ::testing::TestWithParam<SgdConfig> {};

TEST_P(SgdReferenceTest, MatchesDoubleReference) {
  const SgdConfig& config = GetParam();
  const Shape shape = {7, 33};
  const int64_t count = shape.NumElements();
  const std::vector<float> param = RandomFloats(count, 1);
  // Resuming training (piece 4) uses the incoming buffer from the first step on.
  for (int64_t first_piece : {0, 4}) {
    SCOPED_TRACE(testing::Message() << "first piece " << first_piece);
    const std::vector<float> buffer =
        first_piece == 0 ? std::vector<float>(count, 0.0f) : RandomFloats(count, 2);
    std::vector<std::vector<float>> grads;
    for (uint32_t step = 0; step < 5; ++step)
      grads.push_back(RandomFloats(count, 10 + step, -3, 3));
    OpCall call("sgd");
    DescribeSgd(call, shape, config);
    absl::StatusOr<OptimizerSteps> steps =
        RunOptimizer(call, shape, {param, buffer}, grads, /*in_place=*/false, first_piece);
    ASSERT_TRUE(steps.ok()) << steps.status();
    const auto expected = ReferenceSgd(config, param, buffer, grads, first_piece);
    for (size_t step = 0; step < grads.size(); ++step) {
      for (int output = 0; output < 2; ++output) {
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
    Configs, SgdReferenceTest,
    ::testing::Values(SgdConfig{.lr = 0.1}, SgdConfig{.lr = 0.03, .weight_decay = 0.1},
                      SgdConfig{.lr = 0.1, .momentum = 0.9},
                      SgdConfig{.lr = 0.2, .momentum = 0.5, .dampening = 0.5, .weight_decay = 0.05},
                      SgdConfig{.lr = 0.1, .momentum = 0.9, .nesterov = true},
                      SgdConfig{
                          .lr = 0.01, .momentum = 0.99, .weight_decay = 1e-4, .nesterov = true}));

TEST(SgdKernelTest, FirstStepInitializesBufferFromGradient) {
  const Shape shape = {3};
  OpCall call("sgd");
  DescribeSgd(call, shape, {.lr = 0.5, .momentum = 0.9, .weight_decay = 0.25});
  const std::vector<float> param = {1.0f, -2.0f, 4.0f};
  const std::vector<float> stale_buffer = {100.0f, 100.0f, 100.0f};
  const std::vector<float> grad = {0.5f, 1.0f, -1.0f};
  // Piece 0: buf = grad + 0.25 * param, whatever the incoming buffer holds.
  absl::StatusOr<OptimizerSteps> first =
      RunOptimizer(call, shape, {param, stale_buffer}, {grad}, /*in_place=*/false, 0);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_THAT((*first)[0][1], ElementsAreArray({0.75f, 0.5f, 0.0f}));
  EXPECT_THAT((*first)[0][0], ElementsAreArray({0.625f, -2.25f, 4.0f}));
  // Piece 1: buf = 0.9 * 100 + g.
  absl::StatusOr<OptimizerSteps> later =
      RunOptimizer(call, shape, {param, stale_buffer}, {grad}, /*in_place=*/false, 1);
  ASSERT_TRUE(later.ok()) << later.status();
  EXPECT_THAT((*later)[0][1], ElementsAreArray({90.75f, 90.5f, 90.0f}));
}

TEST(SgdKernelTest, WithoutMomentumPassesBufferThrough) {
  const Shape shape = {4};
  const std::vector<float> buffer = {3.0f, -1.0f, 0.5f, 7.0f};
  for (bool in_place : {false, true}) {
    OpCall call("sgd");
    call.Attribute("lr", FloatAttribute(0.5));  // momentum, weight_decay and nesterov default.
    DeclareTensors(call, shape, 3, 2);
    absl::StatusOr<OptimizerSteps> steps =
        RunOptimizer(call, shape, {{1.0f, 2.0f, 3.0f, 4.0f}, buffer},
                     {{2.0f, -2.0f, 0.0f, 1.0f}, {2.0f, 2.0f, 2.0f, 2.0f}}, in_place);
    ASSERT_TRUE(steps.ok()) << steps.status();
    EXPECT_THAT((*steps)[0][0], ElementsAreArray({0.0f, 3.0f, 3.0f, 3.5f}));
    EXPECT_THAT((*steps)[1][0], ElementsAreArray({-1.0f, 2.0f, 2.0f, 2.5f}));
    EXPECT_THAT((*steps)[1][1], ElementsAreArray(buffer));
  }
}

TEST(SgdKernelTest, EmptyTensors) {
  OpCall call("sgd");
  DescribeSgd(call, {0, 5}, {.lr = 0.1, .momentum = 0.9});
  absl::StatusOr<OptimizerSteps> steps =
      RunOptimizer(call, {0, 5}, {{}, {}}, {{}, {}}, /*in_place=*/false);
  ASSERT_TRUE(steps.ok()) << steps.status();
}

absl::Status BuildStatus(const OpCall& call) { return BuildOptimizerKernel(call).status(); }

TEST(SgdKernelTest, RequiresLearningRate) {
  OpCall call("sgd", "sgd_task");
  call.Attribute("momentum", FloatAttribute(0.9));
  DeclareTensors(call, {2, 3}, 3, 2);
  absl::Status status = BuildStatus(call);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "task 'sgd_task' (op 'sgd'): sgd: missing attribute 'lr'");
}

TEST(SgdKernelTest, RejectsMismatchedShapes) {
  OpCall call("sgd", "sgd_task");
  call.Attribute("lr", FloatAttribute(0.1));
  call.Input(MakeTensor({2, 3})).Input(MakeTensor({3, 2})).Input(MakeTensor({2, 3}));
  call.Output({2, 3}).Output({2, 3});
  absl::Status status = BuildStatus(call);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "task 'sgd_task' (op 'sgd'): sgd: input 'grad' has shape [3, 2] but input 'param' has "
            "shape [2, 3]");

  OpCall bad_output("sgd");
  bad_output.Attribute("lr", FloatAttribute(0.1));
  DeclareTensors(bad_output, {6}, 3, 1);
  bad_output.Output({5});
  EXPECT_THAT(
      BuildStatus(bad_output).message(),
      ::testing::HasSubstr(
          "sgd: output 'momentum_buffer_out' has shape [5] but input 'param' has shape [6]"));
}

TEST(SgdKernelTest, RejectsWrongArityAndDataType) {
  OpCall two_inputs("sgd");
  two_inputs.Attribute("lr", FloatAttribute(0.1));
  DeclareTensors(two_inputs, {4}, 2, 2);
  EXPECT_THAT(
      BuildStatus(two_inputs).message(),
      ::testing::HasSubstr("sgd: expects 3 inputs and 2 outputs, got 2 inputs and 2 outputs"));

  OpCall integers("sgd");
  integers.Attribute("lr", FloatAttribute(0.1));
  integers.Input(MakeTensor({4}, plan::INT32)).Input(MakeTensor({4})).Input(MakeTensor({4}));
  integers.Output({4}).Output({4});
  EXPECT_THAT(BuildStatus(integers).message(),
              ::testing::HasSubstr("sgd: input 'param' must be float32, got int32"));
}

TEST(SgdKernelTest, RejectsBadAttributes) {
  struct Case {
    std::vector<std::pair<std::string, plan::AttributeValue>> attributes;
    std::string message;
  };
  const std::vector<Case> cases = {
      {{{"lr", FloatAttribute(-0.1)}}, "sgd: attribute 'lr' must be >= 0, got -0.1"},
      {{{"lr", FloatAttribute(std::numeric_limits<double>::infinity())}},
       "sgd: attribute 'lr' must be finite, got inf"},
      {{{"lr", StringAttribute("0.1")}}, "sgd: attribute 'lr' must be a number (float_value)"},
      {{{"lr", FloatAttribute(0.1)}, {"momentum", FloatAttribute(-0.5)}},
       "sgd: attribute 'momentum' must be >= 0, got -0.5"},
      {{{"lr", FloatAttribute(0.1)}, {"weight_decay", FloatAttribute(-1)}},
       "sgd: attribute 'weight_decay' must be >= 0, got -1"},
      {{{"lr", FloatAttribute(0.1)}, {"nesterov", IntAttribute(1)}},
       "sgd: attribute 'nesterov' must be a boolean (bool_value)"},
      {{{"lr", FloatAttribute(0.1)}, {"nesterov", BoolAttribute(true)}},
       "sgd: nesterov momentum requires a positive 'momentum' and zero 'dampening'"},
      {{{"lr", FloatAttribute(0.1)},
        {"nesterov", BoolAttribute(true)},
        {"momentum", FloatAttribute(0.9)},
        {"dampening", FloatAttribute(0.1)}},
       "sgd: nesterov momentum requires a positive 'momentum' and zero 'dampening'"},
  };
  for (const Case& test_case : cases) {
    OpCall call("sgd", "sgd_task");
    for (const auto& [name, value] : test_case.attributes) call.Attribute(name, value);
    DeclareTensors(call, {4}, 3, 2);
    absl::Status status = BuildStatus(call);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(status.message(), "task 'sgd_task' (op 'sgd'): " + test_case.message);
  }
}

TEST(SgdKernelTest, ComputeRejectsNegativePieceAndOtherShapes) {
  OpCall call("sgd");
  DescribeSgd(call, {4}, {.lr = 0.1, .momentum = 0.9});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildOptimizerKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  absl::Status status = call.Compute(**kernel, -1);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "sgd: the piece is the index of the training step and must be >= 0, got -1");

  std::vector<HostTensor> inputs = {MakeTensor({5}), MakeTensor({5}), MakeTensor({5})};
  status = ComputeInPlace(**kernel, inputs, {0, 2}, 0);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), ::testing::HasSubstr("sgd: input 0 is float32[5] at compute time"));
}

}  // namespace
}  // namespace loom::kernel_test
