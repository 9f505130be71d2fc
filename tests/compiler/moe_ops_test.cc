// The mixture-of-experts ops of compiler/ops/ (moe_route and the slot ops moe_dispatch, moe_combine
// and their gradients): type inference, SBP signatures, cost hints and lowering.
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "compiler/op_definition.h"
#include "compiler/sbp.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/op_test_util.h"

namespace loom::compiler {
namespace {

using ::loom::compiler::testing::AttributeNames;
using ::loom::compiler::testing::Float32;
using ::loom::compiler::testing::Int32;
using ::loom::compiler::testing::Int64;
using ::loom::compiler::testing::TestOp;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::UnorderedElementsAre;

TEST(MoeOpsTest, RouteInfersSlotsOfTheCapacityAndValidates) {
  // C = ceil(1.25 * 64 * 2 / 4) = 40; k = 1 with 8 experts: ceil(1.25 * 64 / 8) = 10.
  TestOp route("moe_route", {Float32({16, 64, 4})});
  route.Int("k", 2).Float("capacity_factor", 1.25);
  absl::StatusOr<std::vector<TensorType>> outputs = route.Infer();
  ASSERT_TRUE(outputs.ok()) << outputs.status();
  EXPECT_THAT(*outputs, ElementsAre(Int32({16, 4, 40}), Float32({16, 4, 40}), Float32({16, 4}),
                                    Float32({16})));
  EXPECT_THAT(route.Signatures(2),
              UnorderedElementsAre("(S(0)) -> (S(0), S(0), S(0), S(0))", "(B) -> (B, B, B, B)"));
  absl::StatusOr<plan::KernelConf> conf = route.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().size(), 1u);
  EXPECT_EQ(conf->attributes().at("k").int_value(), 2);
  TestOp top_one("moe_route", {Float32({2, 64, 8})});
  top_one.Int("k", 1).Int("capacity_factor", 1);
  EXPECT_EQ(top_one.Infer()->at(0), Int32({2, 8, 8}));
  // A huge factor is capped at the tokens (an expert takes a token once).
  TestOp huge("moe_route", {Float32({2, 5, 2})});
  huge.Int("k", 2).Float("capacity_factor", 1e30);
  EXPECT_EQ(huge.Infer()->at(0), Int32({2, 2, 5}));

  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 3).Float("capacity_factor", 1).Error(),
      "attribute 'k' must be 1 or 2 (experts per token), not 3");
  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 1})}).Int("k", 2).Float("capacity_factor", 1).Error(),
      "attribute 'k' = 2 is more than the 1 experts (probs' last axis)");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 1).Error(),
            "attribute 'capacity_factor' is required (e.g. 1.25)");
  EXPECT_EQ(
      TestOp("moe_route", {Float32({2, 5, 2})}).Int("k", 1).Float("capacity_factor", -1).Error(),
      "attribute 'capacity_factor' must be finite and > 0, not -1");
  EXPECT_EQ(TestOp("moe_route", {Float32({10, 2})}).Int("k", 1).Float("capacity_factor", 1).Error(),
            "input 'probs' must be [groups, tokens, experts], not float32[10, 2]");
  EXPECT_THAT(TestOp("moe_route", {Float32({2, 5, 2})})
                  .Int("k", 1)
                  .Float("capacity_factor", 1)
                  .Int("top_k", 1)
                  .Error(),
              HasSubstr("unknown attribute 'top_k'"));
}

TEST(MoeOpsTest, DispatchAndCombineInferAndValidate) {
  TestOp dispatch("moe_dispatch", {Float32({4, 6, 8}), Int32({4, 3, 5})});
  EXPECT_EQ(dispatch.Output(), Float32({4, 3, 5, 8}));
  EXPECT_THAT(dispatch.Signatures(2),
              UnorderedElementsAre("(S(0), S(0)) -> (S(0))", "(S(2), B) -> (S(3))", "(P, B) -> (P)",
                                   "(B, B) -> (B)"));
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6, 8}), Int64({4, 3, 5})}).Error(),
            "input 'slot_token' must be int32, not int64");
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6, 8}), Int32({2, 3, 5})}).Error(),
            "input 'slot_token' must be [groups, experts, capacity] with 4 groups, not "
            "int32[2, 3, 5]");

  TestOp combine("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  combine.Int("tokens", 6);
  EXPECT_EQ(combine.Output(), Float32({4, 6, 8}));
  EXPECT_THAT(combine.Signatures(2),
              UnorderedElementsAre("(S(0), S(0), S(0)) -> (S(0))", "(S(3), B, B) -> (S(2))",
                                   "(P, B, B) -> (P)", "(B, B, B) -> (B)"));
  EXPECT_EQ(
      TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})}).Error(),
      "missing attribute 'tokens'");
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3})})
                .Int("tokens", 6)
                .Error(),
            "input 'slot_weight' float32[4, 3] must have slot_token's shape int32[4, 3, 5]");
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 4, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("tokens", 6)
                .Error(),
            "input 'expert_out' must be [groups, experts, capacity, width] of slot_token "
            "int32[4, 3, 5], not float32[4, 3, 4, 8]");
}

TEST(MoeOpsTest, RouteNamesEveryBadSettingAndInput) {
  auto route_error = [](TensorType probs, int64_t k, double capacity_factor) {
    return TestOp("moe_route", {probs})
        .Int("k", k)
        .Float("capacity_factor", capacity_factor)
        .Error();
  };
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 0, 1),
            "attribute 'k' must be 1 or 2 (experts per token), not 0");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 1, 0),
            "attribute 'capacity_factor' must be finite and > 0, not 0");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 1, std::nan("")),
            "attribute 'capacity_factor' must be finite and > 0, not nan");
  EXPECT_EQ(route_error(Float32({2, 5, 4}), 2, std::numeric_limits<double>::infinity()),
            "attribute 'capacity_factor' must be finite and > 0, not inf");
  EXPECT_EQ(route_error(TensorType{Shape({2, 5, 4}), plan::BFLOAT16}, 1, 1),
            "input 'probs' must be float32, not bfloat16");
  EXPECT_EQ(route_error(Float32({2, 2, 5, 4}), 1, 1),
            "input 'probs' must be [groups, tokens, experts], not float32[2, 2, 5, 4]");
  EXPECT_EQ(route_error(Float32({2, 5, 0}), 1, 1),
            "input 'probs' float32[2, 5, 0] needs at least one token and one expert");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 4})}).Float("capacity_factor", 1).Error(),
            "missing attribute 'k'");
  EXPECT_EQ(TestOp("moe_route", {Float32({2, 5, 4}), Float32({2, 5, 4})})
                .Int("k", 1)
                .Float("capacity_factor", 1)
                .Error(),
            "takes 1 inputs, not 2");
  // Groups fewer than the devices: only the broadcast signature. Cost: 2 |probs|.
  TestOp route("moe_route", {Float32({1, 8, 4})});
  route.Int("k", 1).Float("capacity_factor", 0.1);
  EXPECT_EQ(route.Infer()->at(0), Int32({1, 4, 1}));  // at least one slot
  EXPECT_THAT(route.Signatures(2), ElementsAre("(B) -> (B, B, B, B)"));
  EXPECT_EQ(route.Flops(), 2.0 * 32);
}

TEST(MoeOpsTest, RouteGradInfersSignaturesAndLowers) {
  TestOp grad("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  grad.Int("k", 2);
  EXPECT_EQ(grad.Output(), Float32({4, 6, 3}));
  EXPECT_THAT(grad.Signatures(2), UnorderedElementsAre("(S(0), S(0), S(0)) -> (S(0))",
                                                       "(B, B, P) -> (P)", "(B, B, B) -> (B)"));
  absl::StatusOr<plan::KernelConf> conf = grad.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("k"));
  EXPECT_EQ(conf->attributes().at("k").int_value(), 2);
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("k", 4)
                .Error(),
            "attribute 'k' must be in [1, experts], not 4");
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 2, 5}), Float32({4, 2, 5})})
                .Int("k", 1)
                .Error(),
            "slot_token int32[4, 2, 5] and dslot_weight float32[4, 2, 5] must both be [groups, "
            "experts, capacity] of probs float32[4, 6, 3]");
  EXPECT_EQ(TestOp("moe_route_grad", {Float32({4, 6, 3}), Int32({4, 3, 5}), Int32({4, 3, 5})})
                .Int("k", 1)
                .Error(),
            "input 'dslot_weight' must be float32, not int32");
}

TEST(MoeOpsTest, DispatchCombineAndDispatchGradLowerAndCost) {
  TestOp dispatch("moe_dispatch", {Float32({4, 6, 8}), Int32({4, 3, 5})});
  EXPECT_EQ(dispatch.Flops(), 4.0 * 3 * 5 * 8);
  absl::StatusOr<plan::KernelConf> conf = dispatch.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), IsEmpty());
  // Width smaller than the devices: no width split.
  TestOp narrow("moe_dispatch", {Float32({4, 6, 1}), Int32({4, 3, 5})});
  EXPECT_THAT(narrow.Signatures(2), Not(Contains("(S(2), B) -> (S(3))")));
  EXPECT_EQ(TestOp("moe_dispatch", {Float32({4, 6}), Int32({4, 3, 5})}).Error(),
            "input 'x' must be [groups, tokens, width], not float32[4, 6]");
  EXPECT_EQ(TestOp("moe_dispatch", {Int32({4, 6, 8}), Int32({4, 3, 5})}).Error(),
            "input 'x' must be float32, not int32");

  TestOp combine("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})});
  combine.Int("tokens", 6);
  EXPECT_EQ(combine.Flops(), 2.0 * 4 * 3 * 5 * 8);
  conf = combine.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_THAT(AttributeNames(*conf), ElementsAre("tokens"));
  EXPECT_EQ(conf->attributes().at("tokens").int_value(), 6);
  EXPECT_EQ(TestOp("moe_combine", {Float32({4, 3, 5, 8}), Int32({4, 3, 5}), Float32({4, 3, 5})})
                .Int("tokens", 0)
                .Error(),
            "attribute 'tokens' (tokens per group) must be >= 1, not 0");

  TestOp grad("moe_dispatch_grad", {Float32({4, 3, 5, 8}), Int32({4, 3, 5})});
  grad.Int("tokens", 6);
  EXPECT_EQ(grad.Output(), Float32({4, 6, 8}));
  EXPECT_THAT(grad.Signatures(2),
              UnorderedElementsAre("(S(0), S(0)) -> (S(0))", "(S(3), B) -> (S(2))", "(P, B) -> (P)",
                                   "(B, B) -> (B)"));
  EXPECT_EQ(grad.Flops(), 4.0 * 3 * 5 * 8);
  conf = grad.LowerOnOneDevice();
  ASSERT_TRUE(conf.ok()) << conf.status();
  EXPECT_EQ(conf->attributes().at("tokens").int_value(), 6);
  EXPECT_EQ(TestOp("moe_dispatch_grad", {Float32({4, 3, 5, 8}), Int32({4, 3, 5})}).Error(),
            "missing attribute 'tokens'");
}

}  // namespace
}  // namespace loom::compiler
