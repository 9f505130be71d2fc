// "sgd" and "adamw" with "first_step": a job resumed after k steps, from the parameter and states
// the uninterrupted run had then, continues that run bit for bit.
#include <cstdint>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"
#include "tests/kernels/optimizers/optimizer_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

constexpr int kSteps = 6;
const Shape kShape({2, 5});

struct Case {
  std::string name;
  std::string op_type;
  int num_states;
  std::vector<std::pair<std::string, plan::AttributeValue>> attributes;
};

void Describe(OpCall& call, const Case& test_case, int64_t first_step) {
  for (const auto& [name, value] : test_case.attributes) call.Attribute(name, value);
  if (first_step != 0) call.Attribute("first_step", IntAttribute(first_step));
  DeclareTensors(call, kShape, 2 + test_case.num_states, 1 + test_case.num_states);
}

class OptimizerFirstStepTest : public ::testing::TestWithParam<Case> {};

TEST_P(OptimizerFirstStepTest, ResumedRunContinuesTheUninterruptedOneBitForBit) {
  const Case& test_case = GetParam();
  const int64_t count = kShape.NumElements();
  std::vector<std::vector<float>> initial = {RandomFloats(count, 1)};
  for (int state = 0; state < test_case.num_states; ++state) {
    initial.push_back(std::vector<float>(count, 0.0f));
  }
  std::vector<std::vector<float>> grads;
  for (int step = 0; step < kSteps; ++step) grads.push_back(RandomFloats(count, 100 + step));

  OpCall full_call(test_case.op_type);
  Describe(full_call, test_case, 0);
  absl::StatusOr<OptimizerSteps> full =
      RunOptimizer(full_call, kShape, initial, grads, /*in_place=*/true);
  ASSERT_TRUE(full.ok()) << full.status();

  for (int first_step : {1, 2, 5}) {
    OpCall resumed_call(test_case.op_type);
    Describe(resumed_call, test_case, first_step);
    // The parameter and states after step first_step (its outputs), and the remaining gradients.
    const std::vector<std::vector<float>>& saved = (*full)[first_step - 1];
    const std::vector<std::vector<float>> rest(grads.begin() + first_step, grads.end());
    absl::StatusOr<OptimizerSteps> resumed =
        RunOptimizer(resumed_call, kShape, saved, rest, /*in_place=*/true);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    ASSERT_EQ(resumed->size(), rest.size());
    for (size_t step = 0; step < rest.size(); ++step) {
      EXPECT_EQ((*resumed)[step], (*full)[first_step + step])
          << "first_step " << first_step << ", resumed step " << step;
    }
  }
}

TEST_P(OptimizerFirstStepTest, NegativeFirstStepIsRejected) {
  OpCall call(GetParam().op_type);
  Describe(call, GetParam(), -3);
  absl::Status status = BuildOptimizerKernel(call).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr(GetParam().op_type + ": attribute 'first_step' must be >= 0, got -3"));
}

INSTANTIATE_TEST_SUITE_P(
    Optimizers, OptimizerFirstStepTest,
    ::testing::Values(Case{"AdamW",
                           "adamw",
                           2,
                           {{"lr", FloatAttribute(1e-2)}, {"weight_decay", FloatAttribute(0.1)}}},
                      Case{"SgdMomentum",
                           "sgd",
                           1,
                           {{"lr", FloatAttribute(0.1)},
                            {"momentum", FloatAttribute(0.9)},
                            {"dampening", FloatAttribute(0.25)},
                            {"weight_decay", FloatAttribute(0.01)}}},
                      Case{"SgdNesterov",
                           "sgd",
                           1,
                           {{"lr", FloatAttribute(0.05)},
                            {"momentum", FloatAttribute(0.8)},
                            {"nesterov", BoolAttribute(true)}}},
                      Case{"SgdPlain", "sgd", 1, {{"lr", FloatAttribute(0.3)}}}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// With momentum, PyTorch sets the buffer to the gradient on the first step only: a resumed
// optimizer uses the buffer it is given. One step by hand: buf = 0.9 * 2 + 1 * 0.5 = 2.3,
// param = 1 - 0.1 * 2.3 = 0.77.
TEST(SgdFirstStepTest, ResumedMomentumUsesTheGivenBuffer) {
  const Shape shape({1});
  for (int64_t first_step : {0, 4}) {
    OpCall call("sgd");
    call.Attribute("lr", FloatAttribute(0.1)).Attribute("momentum", FloatAttribute(0.9));
    if (first_step != 0) call.Attribute("first_step", IntAttribute(first_step));
    DeclareTensors(call, shape, 3, 2);
    absl::StatusOr<OptimizerSteps> steps =
        RunOptimizer(call, shape, {{1.0f}, {2.0f}}, {{0.5f}}, /*in_place=*/false);
    ASSERT_TRUE(steps.ok()) << steps.status();
    if (first_step == 0) {
      // The first step ever: buf = g = 0.5, param = 1 - 0.05.
      EXPECT_FLOAT_EQ((*steps)[0][1][0], 0.5f);
      EXPECT_FLOAT_EQ((*steps)[0][0][0], 0.95f);
    } else {
      EXPECT_FLOAT_EQ((*steps)[0][1][0], 2.3f);
      EXPECT_FLOAT_EQ((*steps)[0][0][0], 0.77f);
    }
  }
}

}  // namespace
}  // namespace loom::kernel_test
