// The mixture-of-experts gradients against central differences of their forward kernels:
// moe_route_grad (of slot_weight, through the renormalisation over each token's top-k),
// moe_dispatch_grad, and moe_combine's composed gradient (moe_dispatch of dy, then the weight
// times it and its dot product with expert_out).
#include <cstdint>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/gradients/gradient_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::AnyOf;
using ::testing::Each;
using ::testing::ElementsAre;
using ::testing::FloatNear;
using ::testing::HasSubstr;

// A step small enough that no perturbed probability crosses another of its token (the gaps below
// are at least 0.05), so that every token keeps its top-k experts and their order.
constexpr float kRouteStep = 1e-2f;

// moe_route of probs [B, T, E] with capacity C, not yet run.
void SetUpRoute(OpCall& call, const Shape& probs_shape, int64_t capacity, int64_t k,
                const std::vector<float>& probs) {
  const int64_t groups = probs_shape.dimension(0), experts = probs_shape.dimension(2);
  call.Attribute("k", IntAttribute(k))
      .Input(FloatTensor(probs_shape, probs))
      .Output(Shape({groups, experts, capacity}), plan::INT32)
      .Output(Shape({groups, experts, capacity}))
      .Output(Shape({groups, experts}))
      .Output(Shape({groups}));
}

// moe_route_grad of (probs, slot_token, dslot_weight) -> dprobs.
std::vector<float> RunRouteGrad(int64_t k, const HostTensor& probs, const HostTensor& slot_token,
                                const std::vector<float>& dslot_weight) {
  OpCall grad("moe_route_grad");
  grad.Attribute("k", IntAttribute(k))
      .Input(probs)
      .Input(slot_token)
      .Input(FloatTensor(slot_token.shape, dslot_weight))
      .Output(probs.shape);
  // Stale values, which must be overwritten.
  grad.output(0) = FloatTensor(probs.shape, std::vector<float>(probs.shape.NumElements(), 9.0f));
  absl::Status status = grad.Run();
  EXPECT_TRUE(status.ok()) << status;
  return grad.OutputFloats();
}

TEST(MoeRouteGradKernelTest, TopTwoMatchesFiniteDifferencesWithDroppedAssignments) {
  // 2 groups of 4 tokens, 3 experts of 2 slots. Group 0: t2's first choice (e0) and t3's second
  // (e1) find their experts full; t2's kept slot (e1) still depends on p[t2, e0] through the
  // renormalisation, which the gradient must carry.
  const Shape shape({2, 4, 3});
  const std::vector<float> probs = {
      0.6f, 0.3f, 0.1f, 0.5f,  0.1f,  0.4f, 0.7f,  0.2f,  0.1f, 0.1f, 0.3f, 0.6f,  // group 0
      0.2f, 0.5f, 0.3f, 0.15f, 0.25f, 0.6f, 0.45f, 0.35f, 0.2f, 0.3f, 0.1f, 0.6f,  // group 1
  };
  OpCall route("moe_route");
  SetUpRoute(route, shape, /*capacity=*/2, /*k=*/2, probs);
  ASSERT_TRUE(route.Run().ok());
  EXPECT_THAT(route.OutputFloats(3), ElementsAre(2, 2));
  const HostTensor slot_token = route.output(0);
  const std::vector<float> dslot_weight = RandomFloats(2 * 3 * 2, 61, -2.0f, 2.0f);

  absl::StatusOr<std::vector<double>> numeric =
      NumericGradient(route, 0, {{}, dslot_weight, {}, {}}, kRouteStep);
  ASSERT_TRUE(numeric.ok()) << numeric.status();
  // The slots must not have moved under the perturbations.
  EXPECT_EQ(route.output(0).bytes, slot_token.bytes);
  ExpectGradientNear(RunRouteGrad(2, route.input(0), slot_token, dslot_weight), *numeric,
                     "dprobs (top-2)");
}

TEST(MoeRouteGradKernelTest, TopOneWeightsAreConstantSoTheirGradientIsExactlyZero) {
  const Shape shape({1, 5, 4});
  std::vector<float> probs = RandomFloats(shape.NumElements(), 62, 0.01f, 1.0f);
  OpCall route("moe_route");
  SetUpRoute(route, shape, /*capacity=*/2, /*k=*/1, probs);
  ASSERT_TRUE(route.Run().ok());
  EXPECT_THAT(route.OutputFloats(1), Each(AnyOf(0.0f, 1.0f)));
  const std::vector<float> dprobs =
      RunRouteGrad(1, route.input(0), route.output(0), RandomFloats(4 * 2, 63, -2.0f, 2.0f));
  EXPECT_THAT(dprobs, Each(0.0f));
}

TEST(MoeRouteGradKernelTest, HandComputedTopTwo) {
  // One token, p = (0.6, 0.3, 0.1): chosen {e0, e1}, s = 0.9, weights 2/3 and 1/3. Slots: e0 and
  // e1 hold the token, e2's slot is empty (its dslot_weight is ignored). With dw = (1, 2):
  //   dp0 = 1 * (1 - 2/3) / 0.9 + 2 * (0 - 1/3) / 0.9 = -1 / 2.7,
  //   dp1 = 1 * (0 - 2/3) / 0.9 + 2 * (1 - 1/3) / 0.9 = 2 / 2.7, dp2 = 0 (not chosen).
  const std::vector<float> dprobs =
      RunRouteGrad(2, FloatTensor(Shape({1, 1, 3}), {0.6f, 0.3f, 0.1f}),
                   Int32Tensor(Shape({1, 3, 1}), {0, 0, -1}), {1.0f, 2.0f, 5.0f});
  EXPECT_THAT(dprobs, ElementsAre(FloatNear(-1 / 2.7f, 1e-6f), FloatNear(2 / 2.7f, 1e-6f), 0.0f));
}

TEST(MoeRouteGradKernelTest, ASlotNamingNoTokenIsAnError) {
  OpCall grad("moe_route_grad");
  grad.Attribute("k", IntAttribute(1))
      .Input(FloatTensor(Shape({1, 2, 2}), {0.6f, 0.4f, 0.3f, 0.7f}))
      .Input(Int32Tensor(Shape({1, 2, 1}), {1, -2}))
      .Input(FloatTensor(Shape({1, 2, 1}), {1.0f, 1.0f}))
      .Output(Shape({1, 2, 2}));
  absl::Status status = grad.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("moe_route_grad: slot_token[0, 1, 0] = -2"));
}

// 2 groups of 3 tokens; 2 experts of 2 slots. Group 0: e0 = [t2, t0], e1 = [t0, empty] (t0 in
// two slots, t1 in none); group 1: e0 = [t1, empty], e1 = [t2, t0].
HostTensor Slots() { return Int32Tensor(Shape({2, 2, 2}), {2, 0, 0, -1, 1, -1, 2, 0}); }

TEST(MoeDispatchGradKernelTest, MatchesFiniteDifferences) {
  const Shape x_shape({2, 3, 4});
  const Shape out_shape({2, 2, 2, 4});
  OpCall dispatch("moe_dispatch");
  dispatch.Input(FloatTensor(x_shape, RandomFloats(x_shape.NumElements(), 64)))
      .Input(Slots())
      .Output(out_shape);
  const std::vector<float> dy = RandomFloats(out_shape.NumElements(), 65, -2.0f, 2.0f);
  absl::StatusOr<std::vector<double>> numeric = NumericGradient(dispatch, 0, {dy});
  ASSERT_TRUE(numeric.ok()) << numeric.status();

  OpCall grad("moe_dispatch_grad");
  grad.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(out_shape, dy))
      .Input(Slots())
      .Output(x_shape);
  grad.output(0) = FloatTensor(x_shape, std::vector<float>(x_shape.NumElements(), 9.0f));
  absl::Status status = grad.Run();
  ASSERT_TRUE(status.ok()) << status;
  ExpectGradientNear(grad.OutputFloats(), *numeric, "dx");
}

TEST(MoeCombineGradientTest, ComposedGradientsMatchFiniteDifferences) {
  const Shape rows_shape({2, 2, 2, 4});
  const Shape weight_shape({2, 2, 2});
  const Shape y_shape({2, 3, 4});
  const std::vector<float> rows = RandomFloats(rows_shape.NumElements(), 66);
  const std::vector<float> weights = RandomFloats(weight_shape.NumElements(), 67);
  const std::vector<float> dy = RandomFloats(y_shape.NumElements(), 68, -2.0f, 2.0f);
  OpCall combine("moe_combine");
  combine.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(rows_shape, rows))
      .Input(Slots())
      .Input(FloatTensor(weight_shape, weights))
      .Output(y_shape);
  absl::StatusOr<std::vector<double>> numeric_rows = NumericGradient(combine, 0, {dy});
  ASSERT_TRUE(numeric_rows.ok()) << numeric_rows.status();
  absl::StatusOr<std::vector<double>> numeric_weights = NumericGradient(combine, 2, {dy});
  ASSERT_TRUE(numeric_weights.ok()) << numeric_weights.status();

  // As compiler/ops/gradients.cc composes them: dy's rows brought to the slots by moe_dispatch,
  // times the slot's weight (drows), dotted with the slot's row (dweights).
  OpCall dispatch("moe_dispatch");
  dispatch.Input(FloatTensor(y_shape, dy)).Input(Slots()).Output(rows_shape);
  ASSERT_TRUE(dispatch.Run().ok());
  const std::vector<float> slot_dy = dispatch.OutputFloats();
  const int64_t width = rows_shape.dimension(3);
  std::vector<float> drows(rows.size());
  std::vector<float> dweights(weights.size(), 0.0f);
  for (size_t slot = 0; slot < weights.size(); ++slot) {
    for (int64_t i = 0; i < width; ++i) {
      drows[slot * width + i] = weights[slot] * slot_dy[slot * width + i];
      dweights[slot] += rows[slot * width + i] * slot_dy[slot * width + i];
    }
  }
  ExpectGradientNear(drows, *numeric_rows, "dexpert_out");
  ExpectGradientNear(dweights, *numeric_weights, "dslot_weight");
  // The empty slots (group 0's e1 c1, group 1's e0 c1) get no gradient.
  EXPECT_EQ(dweights[3], 0.0f);
  EXPECT_EQ(dweights[5], 0.0f);
}

}  // namespace
}  // namespace loom::kernel_test
