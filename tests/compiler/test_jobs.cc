#include "tests/compiler/test_jobs.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"

namespace loom::compiler::testing {
namespace {

std::string Variable(const std::string& name, const std::string& shape, const std::string& sbp,
                     int seed, double std = 0.2) {
  return absl::StrCat("variables { name: \"", name, "\" shape: ", shape, " sbp: ", sbp,
                      " initializer { normal { std: ", std, " seed: ", seed, " } } }\n");
}

std::string Op(const std::string& name, const std::string& type, const std::string& inputs,
               const std::string& extra = "") {
  return absl::StrCat("ops { name: \"", name, "\" type: \"", type, "\" inputs: ", inputs,
                      " outputs: \"", name, "\" ", extra, " }\n");
}

std::string IntList(const std::string& key, const std::string& values) {
  return absl::StrCat("attributes { key: \"", key, "\" value { int_list { values: ", values,
                      " } } }");
}

std::string Hint(const std::string& sbp) { return absl::StrCat("output_sbp { sbp: ", sbp, " }"); }

}  // namespace

std::string CpuDevices(int count) {
  std::string list;
  for (int i = 0; i < count; ++i) absl::StrAppend(&list, i == 0 ? "" : ", ", "\"cpu:", i, "\"");
  return absl::StrCat("devices: [", list, "]");
}

std::string MlpRegression(const std::string& placement, const std::string& optimizer) {
  return absl::StrCat(
      "name: \"mlp_regression\" placement { ", placement, " } num_steps: 8\n", "optimizer { ",
      optimizer, " }\nloss: \"loss\"\n",
      "inputs { name: \"x\" shape: [12, 4] sbp: \"S(0)\" random_normal { std: 1 seed: 1 } }\n",
      "inputs { name: \"target\" shape: [12, 2] sbp: \"S(0)\" random_normal { std: 1 seed: 3 } }\n",
      "variables { name: \"w1\" shape: [4, 16] initializer { normal { std: 0.5 seed: 2 } } }\n",
      "variables { name: \"w2\" shape: [16, 2] initializer { normal { std: 0.5 seed: 4 } } }\n",
      Op("h", "matmul", "[\"x\", \"w1\"]"), Op("a", "gelu", "\"h\""),
      Op("y", "matmul", "[\"a\", \"w2\"]"), Op("error", "subtract", "[\"y\", \"target\"]"),
      Op("squared", "multiply", "[\"error\", \"error\"]"), Op("loss", "reduce_mean", "\"squared\""),
      "fetch: \"loss\"\n");
}

std::string DataParallelMlp(const std::string& placement) {
  return absl::StrCat(
      "name: \"dp_mlp\"\nplacement { ", placement, " }\nnum_steps: 2\n",
      "inputs { name: \"x\" shape: [8, 16] sbp: \"S(0)\" random_normal { std: 1 seed: 1 } }\n",
      Variable("w1", "[16, 32]", "\"B\"", 2), Variable("w2", "[32, 8]", "\"B\"", 3),
      Op("h", "matmul", "[\"x\", \"w1\"]"), Op("a", "relu", "\"h\""),
      Op("y", "matmul", "[\"a\", \"w2\"]"), "fetch: \"y\"\n");
}

std::string MegatronMlp(const std::string& placement) {
  return absl::StrCat(
      "name: \"megatron_mlp\"\nplacement { ", placement, " }\nnum_steps: 2\n",
      "inputs { name: \"x\" shape: [8, 16] sbp: \"B\" random_normal { std: 1 seed: 1 } }\n",
      Variable("w1", "[16, 32]", "\"S(1)\"", 2), Variable("b1", "[32]", "\"S(0)\"", 3),
      Variable("w2", "[32, 16]", "\"S(0)\"", 4), Variable("b2", "[16]", "\"B\"", 5),
      Op("h", "matmul", "[\"x\", \"w1\"]"), Op("hb", "bias_add", "[\"h\", \"b1\"]"),
      Op("g", "gelu", "\"hb\""), Op("y", "matmul", "[\"g\", \"w2\"]"),
      Op("z", "bias_add", "[\"y\", \"b2\"]", Hint("\"B\"")), "fetch: \"z\"\n");
}

std::string TwoDimensionalMatmul() {
  return absl::StrCat(
      "name: \"two_dimensional\"\nplacement { devices: [\"cpu:0\", \"cpu:1\", \"cpu:2\", "
      "\"cpu:3\"] hierarchy: [2, 2] }\nnum_steps: 2\n",
      "inputs { name: \"x\" shape: [8, 16] sbp: [\"S(0)\", \"B\"] random_normal { std: 1 seed: 1 "
      "} }\n",
      Variable("w", "[16, 12]", "[\"B\", \"S(1)\"]", 2), Op("y", "matmul", "[\"x\", \"w\"]"),
      Op("r", "relu", "\"y\""), "fetch: \"r\"\n");
}

std::string TwoStageMlp() {
  return absl::StrCat(
      "name: \"two_stage\"\n"
      "placement { devices: [\"cpu:0\", \"cpu:1\", \"cpu:2\", \"cpu:3\"] }\n"
      "stage_placements { devices: [\"cpu:0\", \"cpu:1\"] }\n"
      "stage_placements { devices: [\"cpu:2\", \"cpu:3\"] }\nnum_steps: 3\n",
      "inputs { name: \"x\" shape: [8, 16] sbp: \"S(0)\" placement { devices: [\"cpu:0\", "
      "\"cpu:1\"] } random_normal { std: 1 seed: 1 } }\n",
      "variables { name: \"w1\" shape: [16, 32] initializer { normal { std: 0.2 seed: 2 } } "
      "placement { devices: [\"cpu:0\", \"cpu:1\"] } }\n",
      "variables { name: \"w2\" shape: [32, 8] initializer { normal { std: 0.2 seed: 3 } } "
      "placement { devices: [\"cpu:2\", \"cpu:3\"] } }\n",
      Op("h", "matmul", "[\"x\", \"w1\"]", "stage: 0"), Op("a", "relu", "\"h\"", "stage: 0"),
      Op("y", "matmul", "[\"a\", \"w2\"]", "stage: 1"), "fetch: \"y\"\n");
}

std::string TransformerBlock(const std::string& placement, bool tensor_parallel) {
  const std::string input_sbp = tensor_parallel ? "\"B\"" : "\"S(0)\"";
  const std::string column = tensor_parallel ? "\"S(1)\"" : "\"B\"";
  const std::string column_bias = tensor_parallel ? "\"S(0)\"" : "\"B\"";
  const std::string row = tensor_parallel ? "\"S(0)\"" : "\"B\"";
  const std::string replicated = "\"B\"";
  std::string job =
      absl::StrCat("name: \"transformer_block\"\nplacement { ", placement, " }\nnum_steps: 2\n",
                   "inputs { name: \"x\" shape: [4, 8, 16] sbp: ", input_sbp,
                   " random_normal { std: 1 seed: 11 } }\n",
                   "variables { name: \"ln1_g\" shape: [16] initializer { constant: 1 } }\n",
                   "variables { name: \"ln1_b\" shape: [16] initializer { constant: 0 } }\n",
                   "variables { name: \"ln2_g\" shape: [16] initializer { constant: 1 } }\n",
                   "variables { name: \"ln2_b\" shape: [16] initializer { constant: 0 } }\n",
                   Variable("wq", "[16, 16]", column, 21), Variable("bq", "[16]", column_bias, 22),
                   Variable("wk", "[16, 16]", column, 23), Variable("bk", "[16]", column_bias, 24),
                   Variable("wv", "[16, 16]", column, 25), Variable("bv", "[16]", column_bias, 26),
                   Variable("wo", "[16, 16]", row, 27), Variable("bo", "[16]", replicated, 28),
                   Variable("w1", "[16, 64]", column, 29), Variable("b1", "[64]", column_bias, 30),
                   Variable("w2", "[64, 16]", row, 31), Variable("b2", "[16]", replicated, 32));
  const std::string heads = IntList("shape", "[4, 8, 4, 4]");
  const std::string merged = IntList("shape", "[4, 8, 16]");
  const std::string swap = IntList("permutation", "[0, 2, 1, 3]");
  const std::string hint_b = tensor_parallel ? Hint("\"B\"") : "";
  absl::StrAppend(
      &job, Op("ln1", "layer_norm", "[\"x\", \"ln1_g\", \"ln1_b\"]"),
      Op("q_mm", "matmul", "[\"ln1\", \"wq\"]"), Op("q", "bias_add", "[\"q_mm\", \"bq\"]"),
      Op("k_mm", "matmul", "[\"ln1\", \"wk\"]"), Op("k", "bias_add", "[\"k_mm\", \"bk\"]"),
      Op("v_mm", "matmul", "[\"ln1\", \"wv\"]"), Op("v", "bias_add", "[\"v_mm\", \"bv\"]"),
      Op("q_heads", "reshape", "\"q\"", heads), Op("k_heads", "reshape", "\"k\"", heads),
      Op("v_heads", "reshape", "\"v\"", heads), Op("q_t", "transpose", "\"q_heads\"", swap),
      Op("k_t", "transpose", "\"k_heads\"", swap), Op("v_t", "transpose", "\"v_heads\"", swap),
      Op("attention", "causal_attention", "[\"q_t\", \"k_t\", \"v_t\"]"),
      Op("attention_t", "transpose", "\"attention\"", swap),
      Op("attention_merged", "reshape", "\"attention_t\"", merged),
      Op("proj_mm", "matmul", "[\"attention_merged\", \"wo\"]"),
      Op("proj", "bias_add", "[\"proj_mm\", \"bo\"]", hint_b),
      Op("residual1", "add", "[\"x\", \"proj\"]"),
      Op("ln2", "layer_norm", "[\"residual1\", \"ln2_g\", \"ln2_b\"]"),
      Op("fc_mm", "matmul", "[\"ln2\", \"w1\"]"), Op("fc", "bias_add", "[\"fc_mm\", \"b1\"]"),
      Op("fc_gelu", "gelu", "\"fc\""), Op("fc2_mm", "matmul", "[\"fc_gelu\", \"w2\"]"),
      Op("fc2", "bias_add", "[\"fc2_mm\", \"b2\"]", hint_b),
      Op("out", "add", "[\"residual1\", \"fc2\"]"), "fetch: \"out\"\n");
  return job;
}

}  // namespace loom::compiler::testing
