// The mixture-of-experts kernels: routing (top-k, GShard slot order, capacity drops, ties), and
// the token exchange around the slots.
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::FloatEq;
using ::testing::HasSubstr;
using ::testing::Pointwise;

std::vector<int32_t> IntValues(const HostTensor& tensor) {
  absl::Span<const int32_t> values = tensor.Values<int32_t>();
  return std::vector<int32_t>(values.begin(), values.end());
}

// moe_route of probs [B, T, E] with capacity C.
void Route(OpCall& call, int64_t groups, int64_t tokens, int64_t experts, int64_t capacity,
           int64_t k, const std::vector<float>& probs) {
  call.Attribute("k", IntAttribute(k))
      .Input(FloatTensor(Shape({groups, tokens, experts}), probs))
      .Output(Shape({groups, experts, capacity}), plan::INT32)
      .Output(Shape({groups, experts, capacity}))
      .Output(Shape({groups, experts}))
      .Output(Shape({groups}));
  ASSERT_TRUE(call.Run().ok());
}

TEST(MoeRouteKernelTest, TopTwoFillsSlotsFirstChoicesFirstAndDropsOverCapacity) {
  OpCall call("moe_route");
  // 4 tokens, 3 experts, 2 slots each.
  Route(call, 1, 4, 3, 2, 2,
        {0.6f, 0.3f, 0.1f,    // t0: e0, then e1
         0.5f, 0.1f, 0.4f,    // t1: e0, then e2
         0.7f, 0.2f, 0.1f,    // t2: e0 (full: dropped), then e1
         0.1f, 0.3f, 0.6f});  // t3: e2, then e1 (full: dropped)
  // First choices in token order fill e0 with t0, t1 and e2 with t3; then the second choices:
  // e1 gets t0 and t2, e2 gets t1.
  EXPECT_THAT(IntValues(call.output(0)), ElementsAre(0, 1, 0, 2, 3, 1));
  EXPECT_THAT(call.OutputFloats(1), Pointwise(FloatEq(), {0.6f / 0.9f, 0.5f / 0.9f, 0.3f / 0.9f,
                                                          0.2f / 0.9f, 0.6f / 0.9f, 0.4f / 0.9f}));
  // Before dropping: e0 chosen 3 times, e1 3, e2 2, of 8 assignments.
  EXPECT_THAT(call.OutputFloats(2), ElementsAre(3.0f / 8, 3.0f / 8, 2.0f / 8));
  EXPECT_THAT(call.OutputFloats(3), ElementsAre(2.0f));
}

TEST(MoeRouteKernelTest, LaterTokensFirstChoicesGoBeforeEarlierTokensSecondChoices) {
  // One slot per expert. t0 prefers e0 then e1, t1 prefers e1 then e0: in GShard's order t1's
  // first choice takes e1 before t0's second choice asks for it, and both second choices drop
  // (filling token by token would have given e1 to t0 instead).
  OpCall call("moe_route");
  Route(call, 1, 2, 2, 1, 2, {0.6f, 0.4f, 0.3f, 0.7f});
  EXPECT_THAT(IntValues(call.output(0)), ElementsAre(0, 1));
  EXPECT_THAT(call.OutputFloats(1), ElementsAre(0.6f, 0.7f));
  EXPECT_THAT(call.OutputFloats(2), ElementsAre(0.5f, 0.5f));
  EXPECT_THAT(call.OutputFloats(3), ElementsAre(2.0f));
}

TEST(MoeRouteKernelTest, TiesGoToTheLowerExpertAndTopOneWeighsOne) {
  OpCall top_two("moe_route");
  Route(top_two, 1, 1, 3, 1, 2, {0.4f, 0.4f, 0.2f});
  EXPECT_THAT(IntValues(top_two.output(0)), ElementsAre(0, 0, -1));
  EXPECT_THAT(top_two.OutputFloats(1), ElementsAre(0.5f, 0.5f, 0.0f));

  OpCall top_one("moe_route");
  Route(top_one, 2, 2, 2, 2, 1, {0.3f, 0.7f, 0.9f, 0.1f, 0.5f, 0.5f, 0.2f, 0.8f});
  EXPECT_THAT(IntValues(top_one.output(0)), ElementsAre(1, -1, 0, -1, 0, -1, 1, -1));
  EXPECT_THAT(top_one.OutputFloats(1), ElementsAre(1, 0, 1, 0, 1, 0, 1, 0));
  EXPECT_THAT(top_one.OutputFloats(3), ElementsAre(0, 0));
}

TEST(MoeRouteKernelTest, SkewedRoutingDropsEverythingOverCapacity) {
  // 8 tokens that all prefer expert 0, then expert 1; 4 experts of 2 slots (capacity factor 1,
  // top-1: ceil(8 / 4) = 2).
  std::vector<float> probs;
  for (int t = 0; t < 8; ++t) probs.insert(probs.end(), {0.85f, 0.05f, 0.05f, 0.05f});
  OpCall top_one("moe_route");
  Route(top_one, 1, 8, 4, 2, 1, probs);
  EXPECT_THAT(IntValues(top_one.output(0)), ElementsAre(0, 1, -1, -1, -1, -1, -1, -1));
  EXPECT_THAT(top_one.OutputFloats(2), ElementsAre(1, 0, 0, 0));
  EXPECT_THAT(top_one.OutputFloats(3), ElementsAre(6));
  // Top-2 with 4 slots: the second choices (expert 1, ties to the lower index) fill its 4 slots.
  OpCall top_two("moe_route");
  Route(top_two, 1, 8, 4, 4, 2, probs);
  EXPECT_THAT(IntValues(top_two.output(0)),
              ElementsAre(0, 1, 2, 3, 0, 1, 2, 3, -1, -1, -1, -1, -1, -1, -1, -1));
  EXPECT_THAT(top_two.OutputFloats(3), ElementsAre(8));
}

TEST(MoeSlotKernelsTest, DispatchGathersAndCombineScattersWeighted) {
  // 1 group of 3 tokens of width 2; 2 experts of 2 slots: e0 = [t2, t0], e1 = [t0, empty].
  const HostTensor slots = Int32Tensor(Shape({1, 2, 2}), {2, 0, 0, -1});
  OpCall dispatch("moe_dispatch");
  dispatch.Input(FloatTensor(Shape({1, 3, 2}), {1, 2, 3, 4, 5, 6}))
      .Input(slots)
      .Output(Shape({1, 2, 2, 2}));
  ASSERT_TRUE(dispatch.Run().ok());
  EXPECT_THAT(dispatch.OutputFloats(), ElementsAre(5, 6, 1, 2, 1, 2, 0, 0));

  OpCall combine("moe_combine");
  combine.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(Shape({1, 2, 2, 2}), {10, 20, 30, 40, 50, 60, 70, 80}))
      .Input(slots)
      .Input(FloatTensor(Shape({1, 2, 2}), {0.5f, 0.25f, 0.75f, 0}))
      .Output(Shape({1, 3, 2}));
  ASSERT_TRUE(combine.Run().ok());
  // t0: 0.25 * [30, 40] + 0.75 * [50, 60]; t1: in no slot; t2: 0.5 * [10, 20].
  EXPECT_THAT(combine.OutputFloats(), ElementsAre(45, 55, 0, 0, 5, 10));

  OpCall gradient("moe_dispatch_grad");
  gradient.Attribute("tokens", IntAttribute(3))
      .Input(FloatTensor(Shape({1, 2, 2, 2}), {1, 1, 2, 2, 3, 3, 4, 4}))
      .Input(slots)
      .Output(Shape({1, 3, 2}));
  ASSERT_TRUE(gradient.Run().ok());
  EXPECT_THAT(gradient.OutputFloats(), ElementsAre(5, 5, 0, 0, 1, 1));
}

TEST(MoeSlotKernelsTest, ASlotNamingNoTokenIsAnErrorNotACrash) {
  OpCall dispatch("moe_dispatch");
  dispatch.Input(FloatTensor(Shape({1, 3, 2}), {1, 2, 3, 4, 5, 6}))
      .Input(Int32Tensor(Shape({1, 2, 1}), {0, 3}))
      .Output(Shape({1, 2, 1, 2}));
  absl::Status status = dispatch.Run();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("slot_token[0, 1, 0] = 3"));
}

}  // namespace
}  // namespace loom::kernel_test
