// Autodiff (compiler/autodiff.h): gradients against finite differences, computed by compiling and
// running jobs, and the same gradients on 1 and 2 devices.
#include "compiler/autodiff.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/ops/elementwise_ops.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

struct Variable {
  std::string name;
  std::string shape;
  std::string sbp;  // for the multi-device run; "" = the default (B)
  std::string initializer = "";
};

// A forward op under test: `ops` reads each variable v as "v_eff" = v * t (t a scalar variable
// with value 1) and writes "y" of shape `y_shape`; the loss is sum(y * r) for a random r. Then
// dloss/dt = sum over v of sum(v * grad/v), and dloss/dt is also checked against the central
// difference of the loss in t.
struct Case {
  std::string name;
  std::vector<Variable> variables;
  std::string inputs;  // job text: inputs the ops read as they are
  std::string ops;     // job text
  std::string y_shape;
};

void PrintTo(const Case& test, std::ostream* os) { *os << test.name; }

std::string Op(const std::string& name, const std::string& type, const std::string& inputs,
               const std::string& extra = "") {
  return absl::StrCat("ops { name: \"", name, "\" type: \"", type, "\" inputs: ", inputs,
                      " outputs: \"", name, "\" ", extra, " }\n");
}

job::Job BuildJob(const Case& test, int devices, double t) {
  std::string text = absl::StrCat("name: \"", test.name, "\"\nplacement { ", CpuDevices(devices),
                                  " }\nnum_steps: 1\n", test.inputs);
  int seed = 1;
  for (const Variable& variable : test.variables) {
    std::string initializer = variable.initializer.empty()
                                  ? absl::StrCat("normal { std: 1 seed: ", seed++, " }")
                                  : variable.initializer;
    absl::StrAppend(&text, "variables { name: \"", variable.name, "\" shape: ", variable.shape,
                    variable.sbp.empty() ? "" : absl::StrCat(" sbp: \"", variable.sbp, "\""),
                    " initializer { ", initializer, " } }\n");
    absl::StrAppend(&text, Op(variable.name + "_eff", "multiply",
                              absl::StrCat("[\"", variable.name, "\", \"t\"]")));
  }
  absl::StrAppend(&text, "variables { name: \"t\" shape: [1] initializer { constant: ", t,
                  " } }\n");
  absl::StrAppend(&text, "variables { name: \"r\" shape: ", test.y_shape,
                  " initializer { normal { std: 1 seed: 99 } } }\n");
  absl::StrAppend(&text, test.ops, Op("yr", "multiply", "[\"y\", \"r\"]"),
                  Op("loss", "reduce_sum", "\"yr\""), "fetch: \"loss\"\n");
  return ParseJob(text);
}

absl::StatusOr<job::Job> WithBackward(const Case& test, int devices) {
  job::Job job = BuildJob(test, devices, 1.0);
  absl::StatusOr<job::Job> backward =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(devices, 1), "loss");
  if (!backward.ok()) return backward.status();
  backward->add_fetch("grad/t");
  for (const Variable& variable : test.variables) {
    backward->add_fetch(variable.name);
    backward->add_fetch("grad/" + variable.name);
  }
  return backward;
}

double Scalar(const std::map<std::string, std::vector<HostTensor>>& fetches,
              const std::string& name) {
  return fetches.at(name).at(0).Values<float>()[0];
}

void CheckAgainstFiniteDifferences(const Case& test) {
  SCOPED_TRACE(test.name);
  absl::StatusOr<job::Job> backward = WithBackward(test, 1);
  ASSERT_TRUE(backward.ok()) << backward.status();
  auto fetches = CompileAndRun(*backward, 1);
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  const double h = 5e-3;
  auto plus = CompileAndRun(BuildJob(test, 1, 1.0 + h), 1);
  ASSERT_TRUE(plus.ok()) << plus.status();
  auto minus = CompileAndRun(BuildJob(test, 1, 1.0 - h), 1);
  ASSERT_TRUE(minus.ok()) << minus.status();
  const double numeric = (Scalar(*plus, "loss") - Scalar(*minus, "loss")) / (2 * h);
  const double dt = Scalar(*fetches, "grad/t");
  double chain = 0;
  for (const Variable& variable : test.variables) {
    absl::Span<const float> values = fetches->at(variable.name)[0].Values<float>();
    absl::Span<const float> gradient = fetches->at("grad/" + variable.name)[0].Values<float>();
    ASSERT_EQ(values.size(), gradient.size()) << variable.name;
    for (size_t i = 0; i < values.size(); ++i) chain += double{values[i]} * gradient[i];
  }
  const double scale = std::max(1.0, std::abs(numeric));
  EXPECT_NEAR(dt, numeric, 1e-2 * scale) << "grad/t against finite differences";
  EXPECT_NEAR(chain, dt, 1e-3 * scale) << "sum(v * grad/v) against grad/t";
}

void CheckSameOnTwoDevices(const Case& test) {
  SCOPED_TRACE(test.name);
  absl::StatusOr<job::Job> one = WithBackward(test, 1);
  ASSERT_TRUE(one.ok()) << one.status();
  absl::StatusOr<job::Job> two = WithBackward(test, 2);
  ASSERT_TRUE(two.ok()) << two.status();
  auto expected = CompileAndRun(*one, 1);
  ASSERT_TRUE(expected.ok()) << expected.status();
  auto actual = CompileAndRun(*two, 2);
  ASSERT_TRUE(actual.ok()) << actual.status();
  ExpectSameFetches(*expected, *actual, 1e-4, test.name + " on 2 devices");
}

const char kDataParallelX[] =
    "inputs { name: \"x\" shape: [4, 3] random_normal { std: 1 seed: 7 } }\n";

std::vector<Case> Cases() {
  std::vector<Case> cases;
  // matmul in every transpose combination; b tensor-parallel.
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      std::string attributes;
      if (transpose_a)
        attributes += "attributes { key: \"transpose_a\" value { bool_value: true } } ";
      if (transpose_b)
        attributes += "attributes { key: \"transpose_b\" value { bool_value: true } } ";
      cases.push_back(
          Case{absl::StrCat("matmul_", transpose_a, transpose_b),
               {{"a", transpose_a ? "[3, 4]" : "[4, 3]", "S(0)"},
                {"b", transpose_b ? "[5, 3]" : "[3, 5]", transpose_b ? "S(0)" : "S(1)"}},
               "",
               Op("y", "matmul", "[\"a_eff\", \"b_eff\"]", attributes),
               "[4, 5]"});
    }
  }
  cases.push_back(Case{"batched_matmul",
                       {{"a", "[2, 4, 3]", "S(0)"}, {"b", "[3, 5]", "S(1)"}},
                       "",
                       Op("y", "matmul", "[\"a_eff\", \"b_eff\"]"),
                       "[2, 4, 5]"});
  cases.push_back(Case{"data_parallel_matmul",
                       {{"w", "[3, 5]", ""}},
                       kDataParallelX,
                       Op("y", "matmul", "[\"x\", \"w_eff\"]"),
                       "[4, 5]"});
  for (const char* op_type : {"add", "subtract", "multiply", "divide"}) {
    cases.push_back(
        Case{op_type,
             {{"a", "[4, 3]", "S(0)"}, {"b", "[3]", "", "uniform { low: 1 high: 2 seed: 5 }"}},
             "",
             Op("y", op_type, "[\"a_eff\", \"b_eff\"]"),
             "[4, 3]"});
    cases.push_back(Case{absl::StrCat(op_type, "_broadcast_first"),
                         {{"a", "[4, 1]", "", "uniform { low: 1 high: 2 seed: 6 }"},
                          {"b", "[2, 4, 3]", "S(2)", "uniform { low: 1 high: 2 seed: 8 }"}},
                         "",
                         Op("y", op_type, "[\"b_eff\", \"a_eff\"]"),
                         "[2, 4, 3]"});
  }
  cases.push_back(Case{"bias_add",
                       {{"x", "[4, 3]", "S(0)"}, {"bias", "[3]", ""}},
                       "",
                       Op("y", "bias_add", "[\"x_eff\", \"bias_eff\"]"),
                       "[4, 3]"});
  for (const char* op_type : {"relu", "gelu", "tanh", "identity"}) {
    cases.push_back(
        Case{op_type, {{"x", "[4, 6]", "S(1)"}}, "", Op("y", op_type, "\"x_eff\""), "[4, 6]"});
  }
  cases.push_back(Case{
      "scale",
      {{"x", "[4, 6]", "S(0)"}},
      "",
      Op("y", "scale", "\"x_eff\"", "attributes { key: \"scale\" value { float_value: 2.5 } }"),
      "[4, 6]"});
  cases.push_back(Case{"reduce_sum",
                       {{"x", "[4, 6]", "S(1)"}},
                       "",
                       Op("y", "reduce_sum", "\"x_eff\"",
                          "attributes { key: \"axes\" value { int_list { values: [1] } } }"),
                       "[4]"});
  cases.push_back(Case{"reduce_mean_keep_dims",
                       {{"x", "[4, 6]", "S(0)"}},
                       "",
                       Op("y", "reduce_mean", "\"x_eff\"",
                          "attributes { key: \"axes\" value { int_list { values: [0] } } } "
                          "attributes { key: \"keep_dims\" value { bool_value: true } }"),
                       "[1, 6]"});
  cases.push_back(Case{
      "reduce_mean_all", {{"x", "[4, 6]", "S(0)"}}, "", Op("y", "reduce_mean", "\"x_eff\""), "[]"});
  for (const char* op_type : {"softmax", "log_softmax"}) {
    cases.push_back(
        Case{op_type, {{"x", "[4, 6]", "S(0)"}}, "", Op("y", op_type, "\"x_eff\""), "[4, 6]"});
  }
  cases.push_back(Case{"layer_norm",
                       {{"x", "[4, 6]", "S(0)"},
                        {"gamma", "[6]", "", "uniform { low: 0.5 high: 1.5 seed: 4 }"},
                        {"beta", "[6]", ""}},
                       "",
                       Op("y", "layer_norm", "[\"x_eff\", \"gamma_eff\", \"beta_eff\"]"),
                       "[4, 6]"});
  cases.push_back(Case{"sparse_cross_entropy",
                       {{"logits", "[4, 5]", "S(0)"}},
                       "inputs { name: \"labels\" shape: [4] data_type: INT64 "
                       "random_integers_below: 5 seed: 3 }\n",
                       Op("y", "sparse_cross_entropy", "[\"logits_eff\", \"labels\"]"),
                       "[4]"});
  cases.push_back(Case{"reshape",
                       {{"x", "[4, 6]", "S(0)"}},
                       "",
                       Op("y", "reshape", "\"x_eff\"",
                          "attributes { key: \"shape\" value { int_list { values: [2, 12] } } }"),
                       "[2, 12]"});
  cases.push_back(
      Case{"transpose",
           {{"x", "[4, 6]", "S(1)"}},
           "",
           Op("y", "transpose", "\"x_eff\"",
              "attributes { key: \"permutation\" value { int_list { values: [1, 0] } } }"),
           "[6, 4]"});
  cases.push_back(Case{"slice",
                       {{"x", "[4, 6]", "S(1)"}},
                       "",
                       Op("y", "slice", "\"x_eff\"",
                          "attributes { key: \"begin\" value { int_list { values: [1, 0] } } } "
                          "attributes { key: \"end\" value { int_list { values: [3, 6] } } }"),
                       "[2, 6]"});
  cases.push_back(Case{"concat",
                       {{"a", "[4, 2]", "S(0)"}, {"b", "[4, 3]", "S(0)"}},
                       "",
                       Op("y", "concat", "[\"a_eff\", \"b_eff\"]",
                          "attributes { key: \"axis\" value { int_value: -1 } }"),
                       "[4, 5]"});
  // Embedding: data parallel ids, and the table vocab-parallel or split on the embedding axis.
  for (const char* sbp : {"S(0)", "S(1)"}) {
    cases.push_back(Case{
        absl::StrCat("embedding_table_", sbp[2] == '0' ? "vocab" : "dim"),
        {{"table", "[7, 4]", sbp}},
        // Vocab parallel: ids whole on every device.
        absl::StrCat("inputs { name: \"ids\" shape: [4, 3] data_type: INT64 ",
                     sbp[2] == '0' ? "sbp: \"B\" " : "", "random_integers_below: 7 seed: 3 }\n"),
        Op("y", "embedding", "[\"table_eff\", \"ids\"]"),
        "[4, 3, 4]"});
  }
  // Attention: heads split (tensor parallel) and batch split.
  for (const char* sbp : {"S(0)", "S(1)"}) {
    cases.push_back(
        Case{absl::StrCat("causal_attention_", sbp[2] == '0' ? "batch" : "heads"),
             {{"q", "[2, 2, 5, 3]", sbp}, {"k", "[2, 2, 5, 3]", sbp}, {"v", "[2, 2, 5, 3]", sbp}},
             "",
             Op("y", "causal_attention", "[\"q_eff\", \"k_eff\", \"v_eff\"]"),
             "[2, 2, 5, 3]"});
  }
  // Mixture of experts: slots of 3 experts x 2 per group over 4 tokens (tokens repeat).
  const std::string slots =
      "inputs { name: \"slots\" shape: [2, 3, 2] data_type: INT32 random_integers_below: 4 "
      "seed: 3 }\n";
  const std::string tokens = "attributes { key: \"tokens\" value { int_value: 4 } }";
  for (const char* sbp : {"S(0)", "S(3)"}) {
    cases.push_back(
        Case{absl::StrCat("moe_combine_", sbp[2] == '0' ? "groups" : "width"),
             {{"rows", "[2, 3, 2, 5]", sbp}, {"weights", "[2, 3, 2]", ""}},
             slots,
             Op("y", "moe_combine", "[\"rows_eff\", \"slots\", \"weights_eff\"]", tokens),
             "[2, 4, 5]"});
  }
  cases.push_back(Case{"moe_dispatch",
                       {{"x", "[2, 4, 5]", "S(0)"}},
                       slots,
                       Op("y", "moe_dispatch", "[\"x_eff\", \"slots\"]"),
                       "[2, 3, 2, 5]"});
  // Routing: the renormalised top-k weights through the softmax, with capacity 2 of 6 tokens x 2
  // choices / 4 experts (some assignments dropped); scaling the logits keeps every token's
  // choice, so the finite differences cross no switch of the top-k.
  auto route = [](int k, double capacity_factor) {
    return absl::StrCat(
        "ops { name: \"route\" type: \"moe_route\" inputs: \"probs\" outputs: [\"slot_token\", "
        "\"slot_weight\", \"fraction\", \"dropped\"] attributes { key: \"k\" value { int_value: ",
        k, " } } attributes { key: \"capacity_factor\" value { float_value: ", capacity_factor,
        " } } }\n");
  };
  for (int k : {1, 2}) {
    cases.push_back(Case{absl::StrCat("moe_route_top", k),
                         {{"logits", "[2, 6, 4]", "S(0)"}},
                         "",
                         Op("probs", "softmax", "\"logits_eff\"") + route(k, 0.66) +
                             Op("y", "identity", "\"slot_weight\""),
                         "[2, 4, 2]"});
  }
  // A whole MoE layer: router logits -> softmax -> top-2 routing -> dispatch -> an "expert"
  // (tanh) -> combine, differentiated through the top-k choice into the logits and the tokens.
  cases.push_back(Case{"moe_layer",
                       {{"logits", "[2, 6, 4]", "S(0)"}, {"x", "[2, 6, 3]", "S(0)"}},
                       "",
                       Op("probs", "softmax", "\"logits_eff\"") + route(2, 1.0) +
                           Op("dispatched", "moe_dispatch", "[\"x_eff\", \"slot_token\"]") +
                           Op("expert", "tanh", "\"dispatched\"") +
                           Op("y", "moe_combine", "[\"expert\", \"slot_token\", \"slot_weight\"]",
                              "attributes { key: \"tokens\" value { int_value: 6 } }"),
                       "[2, 6, 3]"});
  // The Switch Transformer load-balancing term, expert_fraction * the mean router probability:
  // expert_fraction is on the loss path but has no gradient (it counts choices), so the logits'
  // gradient comes through the mean alone.
  cases.push_back(Case{"moe_route_load_balancing",
                       {{"logits", "[2, 6, 4]", "S(0)"}},
                       "",
                       Op("probs", "softmax", "\"logits_eff\"") + route(2, 1.0) +
                           Op("mean_probs", "reduce_mean", "\"probs\"",
                              "attributes { key: \"axes\" value { int_list { values: [1] } } }") +
                           Op("y", "multiply", "[\"fraction\", \"mean_probs\"]"),
                       "[2, 4]"});
  // An MLP with tensors used twice (gradients summed): Megatron layout on 2 devices.
  cases.push_back(Case{"mlp",
                       {{"w1", "[3, 8]", "S(1)"}, {"b1", "[8]", "S(0)"}, {"w2", "[8, 2]", "S(0)"}},
                       kDataParallelX,
                       Op("h", "matmul", "[\"x\", \"w1_eff\"]") +
                           Op("hb", "bias_add", "[\"h\", \"b1_eff\"]") + Op("a", "gelu", "\"hb\"") +
                           Op("o1", "matmul", "[\"a\", \"w2_eff\"]") + Op("a2", "tanh", "\"a\"") +
                           Op("o2", "matmul", "[\"a2\", \"w2_eff\"]") +
                           Op("y", "add", "[\"o1\", \"o2\"]"),
                       "[4, 2]"});
  return cases;
}

class AutodiffTest : public ::testing::TestWithParam<Case> {};

TEST_P(AutodiffTest, MatchesFiniteDifferences) { CheckAgainstFiniteDifferences(GetParam()); }

TEST_P(AutodiffTest, SameOnTwoDevices) { CheckSameOnTwoDevices(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Ops, AutodiffTest, ::testing::ValuesIn(Cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name;
                         });

// The layouts the two-device runs above exercise.
TEST(AutodiffTest, TensorParallelGradientsKeepTheirLayout) {
  for (const Case& test : Cases()) {
    if (test.name != "causal_attention_heads" && test.name != "layer_norm") {
      continue;
    }
    absl::StatusOr<job::Job> backward = WithBackward(test, 2);
    ASSERT_TRUE(backward.ok()) << backward.status();
    auto compiled = CompileOn(*backward, 2);
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    if (test.name == "causal_attention_heads") {
      EXPECT_EQ(SbpOf(*compiled, "grad/y/causal_attention_grad:0"), "S(1)");
    } else {
      EXPECT_EQ(SbpOf(*compiled, "grad/y/layer_norm_grad:1"), "P");
    }
  }
}

TEST(AutodiffTest, GradientsFlowBackThroughCastsInTheInputsType) {
  // loss = sum(0.1 * float32(bfloat16(w))): the gradient 0.1 reaches w through the casts' own
  // gradient, a cast to bfloat16 and back, so it arrives rounded to bfloat16: 0.10009765625.
  job::Job job = ParseJob(R"pb(
    name: "casts"
    placement { devices: [ "cpu:0" ] }
    variables {
      name: "w"
      shape: [ 3 ]
      initializer { constant: 1 }
    }
    ops {
      name: "down"
      type: "cast"
      inputs: "w"
      outputs: "w16"
      attributes {
        key: "to"
        value { string_value: "bfloat16" }
      }
    }
    ops {
      name: "up"
      type: "cast"
      inputs: "w16"
      outputs: "w32"
      attributes {
        key: "to"
        value { string_value: "float32" }
      }
    }
    ops {
      name: "scaled"
      type: "scale"
      inputs: "w32"
      outputs: "y"
      attributes {
        key: "scale"
        value { float_value: 0.1 }
      }
    }
    ops { name: "loss" type: "reduce_sum" inputs: "y" outputs: "loss" }
  )pb");
  absl::StatusOr<job::Job> backward =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(1, 1), "loss");
  ASSERT_TRUE(backward.ok()) << backward.status();
  backward->add_fetch("grad/w");
  auto fetches = CompileAndRun(*backward, 1);
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  EXPECT_THAT(fetches->at("grad/w")[0].Values<float>(), ::testing::Each(0.10009765625f));
}

TEST(AutodiffTest, VariableTheLossDoesNotDependOnGetsNoGradient) {
  job::Job job = ParseJob(R"pb(
    name: "unused"
    placement { devices: [ "cpu:0" ] }
    variables {
      name: "w"
      shape: [ 2 ]
      initializer { constant: 2 }
    }
    variables {
      name: "unused"
      shape: [ 2 ]
      initializer { constant: 1 }
    }
    ops { name: "loss" type: "reduce_sum" inputs: "w" outputs: "loss" }
    ops { name: "other" type: "relu" inputs: "unused" outputs: "other" }
  )pb");
  absl::StatusOr<job::Job> backward =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(1, 1), "loss");
  ASSERT_TRUE(backward.ok()) << backward.status();
  std::vector<std::string> outputs;
  for (const job::Op& op : backward->ops()) {
    for (const std::string& output : op.outputs()) outputs.push_back(output);
  }
  EXPECT_THAT(outputs, ::testing::Contains("grad/w"));
  EXPECT_THAT(outputs, ::testing::Not(::testing::Contains("grad/unused")));
  backward->add_fetch("grad/w");
  auto fetches = CompileAndRun(*backward, 1);
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  EXPECT_THAT(fetches->at("grad/w")[0].Values<float>(), ::testing::ElementsAre(1.0f, 1.0f));
}

TEST(AutodiffTest, BackwardOpsKeepTheForwardOpsStage) {
  job::Job job = ParseJob(R"pb(
    name: "staged"
    placement { devices: [ "cpu:0", "cpu:1" ] }
    stage_placements { devices: [ "cpu:0" ] }
    stage_placements { devices: [ "cpu:1" ] }
    variables {
      name: "w"
      shape: [ 2 ]
      initializer { constant: 2 }
      placement { devices: [ "cpu:0" ] }
    }
    ops { name: "h" type: "relu" inputs: "w" outputs: "h" stage: 0 }
    ops { name: "loss" type: "reduce_sum" inputs: "h" outputs: "loss" stage: 1 }
  )pb");
  absl::StatusOr<job::Job> backward =
      AddBackward(job, StandardOps(), DeviceSet::Cpus(2, 1), "loss");
  ASSERT_TRUE(backward.ok()) << backward.status();
  for (const job::Op& op : backward->ops()) {
    if (op.type() == "relu_grad") {
      EXPECT_EQ(op.stage(), 0);
    }
    if (op.type() == "broadcast_to") {
      EXPECT_EQ(op.stage(), 1);
    }
    if (op.name().rfind("grad/", 0) == 0 && op.name() != "grad/w") {
      EXPECT_TRUE(op.has_stage()) << op.name();
    }
  }
  backward->add_fetch("grad/w");
  auto fetches = CompileAndRun(*backward, 2);
  ASSERT_TRUE(fetches.ok()) << fetches.status();
  EXPECT_THAT(fetches->at("grad/w")[0].Values<float>(), ::testing::ElementsAre(1.0f, 1.0f));
}

job::Job SmallJob() {
  return ParseJob(R"pb(
    name: "small"
    placement { devices: [ "cpu:0" ] }
    variables {
      name: "w"
      shape: [ 4, 2 ]
      initializer { constant: 1 }
    }
    ops { name: "s" type: "softmax" inputs: "w" outputs: "s" }
    ops { name: "loss" type: "reduce_sum" inputs: "s" outputs: "loss" }
  )pb");
}

TEST(AutodiffTest, LossMustBeAScalar) {
  absl::StatusOr<job::Job> backward =
      AddBackward(SmallJob(), StandardOps(), DeviceSet::Cpus(1, 1), "w");
  ASSERT_FALSE(backward.ok());
  EXPECT_EQ(backward.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(backward.status().message(), "the loss 'w' must be a scalar, not float32[4, 2]");
}

TEST(AutodiffTest, UnknownLoss) {
  absl::StatusOr<job::Job> backward =
      AddBackward(SmallJob(), StandardOps(), DeviceSet::Cpus(1, 1), "nothing");
  ASSERT_FALSE(backward.ok());
  EXPECT_EQ(backward.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(backward.status().message(), ::testing::HasSubstr("'nothing'"));
}

TEST(AutodiffTest, OpTypeWithoutGradient) {
  OpRegistry registry;
  ASSERT_TRUE(RegisterStandardOps(&registry).ok());
  ASSERT_TRUE(registry.Register("opaque", MakeUnaryOp(/*linear=*/false)).ok());
  job::Job job = SmallJob();
  job.mutable_ops(0)->set_type("opaque");
  absl::StatusOr<job::Job> backward = AddBackward(job, registry, DeviceSet::Cpus(1, 1), "loss");
  ASSERT_FALSE(backward.ok());
  EXPECT_EQ(backward.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(backward.status().message(), ::testing::HasSubstr("op 's' (opaque)"));
  EXPECT_THAT(backward.status().message(), ::testing::HasSubstr("op type has no gradient"));
}

}  // namespace
}  // namespace loom::compiler::testing
