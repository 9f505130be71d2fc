#include "bench/compile_scale/gpt_job.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/job_builder.h"

namespace loom::bench {

job::Job MakeGptJob(const GptShape& shape, int data, int tensor, int pipeline,
                    int devices_per_node) {
  JobBuilder builder("gpt_forward");
  const int stage_size = data * tensor;
  std::vector<std::string> all_devices;
  for (int stage = 0; stage < pipeline; ++stage) {
    std::vector<std::string> devices;
    for (int i = 0; i < stage_size; ++i) {
      int global = stage * stage_size + i;
      devices.push_back(
          absl::StrCat("node", global / devices_per_node, "/cpu:", global % devices_per_node));
      all_devices.push_back(devices.back());
    }
    builder.AddStagePlacement(devices, {data, tensor});
  }
  builder.SetPlacement(all_devices);
  const int64_t b = shape.batch, t = shape.sequence, d = shape.width, h = shape.heads;
  auto stage_of = [&](int layer) { return layer * pipeline / shape.layers; };
  auto stage_devices = [&](int stage) {
    return std::vector<std::string>(all_devices.begin() + stage * stage_size,
                                    all_devices.begin() + (stage + 1) * stage_size);
  };
  auto options = [&](int stage, std::vector<std::string> hint = {}) {
    JobBuilder::OpOptions result;
    result.stage = stage;
    if (!hint.empty()) result.output_sbp.push_back(hint);
    return result;
  };
  auto variable = [&](const std::string& name, std::vector<int64_t> variable_shape,
                      std::vector<std::string> sbp, int stage, int64_t seed) {
    return builder.Variable(name, variable_shape, NormalInit(0.02, seed), std::move(sbp),
                            stage_devices(stage));
  };
  std::string x =
      builder.Input("x", {b, t, d}, RandomNormal(1.0, 1), {"S(0)", "B"}, stage_devices(0));
  int64_t seed = 10;
  for (int layer = 0; layer < shape.layers; ++layer) {
    const int stage = stage_of(layer);
    const std::string p = absl::StrCat("h", layer, ".");
    auto weight = [&](const std::string& name, std::vector<int64_t> weight_shape,
                      std::vector<std::string> sbp) {
      return variable(p + name, std::move(weight_shape), std::move(sbp), stage, seed++);
    };
    const std::vector<std::string> column = {"B", "S(1)"}, column_bias = {"B", "S(0)"},
                                   row = {"B", "S(0)"}, replicated = {"B", "B"};
    std::string ln1_g = weight("ln_1.weight", {d}, replicated);
    std::string ln1_b = weight("ln_1.bias", {d}, replicated);
    std::string ln1 = builder.Op("layer_norm", p + "ln_1", {x, ln1_g, ln1_b}, {}, options(stage));
    std::vector<std::string> heads;
    for (const char* which : {"q", "k", "v"}) {
      std::string w = weight(absl::StrCat("attn.", which, ".weight"), {d, d}, column);
      std::string bias = weight(absl::StrCat("attn.", which, ".bias"), {d}, column_bias);
      std::string mm = builder.Matmul(p + which + "_mm", ln1, w, false, false, options(stage));
      std::string biased = builder.BiasAdd(p + which, mm, bias, options(stage));
      std::string split =
          builder.Op("reshape", p + which + "_heads", {biased},
                     {{"shape", IntListAttribute({b, t, h, d / h})}}, options(stage));
      heads.push_back(builder.Op("transpose", p + which + "_t", {split},
                                 {{"permutation", IntListAttribute({0, 2, 1, 3})}},
                                 options(stage)));
    }
    std::string attention =
        builder.Op("causal_attention", p + "attention", heads, {}, options(stage));
    std::string back =
        builder.Op("transpose", p + "attention_t", {attention},
                   {{"permutation", IntListAttribute({0, 2, 1, 3})}}, options(stage));
    std::string merged = builder.Op("reshape", p + "attention_merged", {back},
                                    {{"shape", IntListAttribute({b, t, d})}}, options(stage));
    std::string wo = weight("attn.c_proj.weight", {d, d}, row);
    std::string bo = weight("attn.c_proj.bias", {d}, replicated);
    std::string proj_mm = builder.Matmul(p + "proj_mm", merged, wo, false, false, options(stage));
    std::string proj = builder.BiasAdd(p + "proj", proj_mm, bo, options(stage, {"S(0)", "B"}));
    std::string residual = builder.Add(p + "residual_1", x, proj, options(stage));
    std::string ln2_g = weight("ln_2.weight", {d}, replicated);
    std::string ln2_b = weight("ln_2.bias", {d}, replicated);
    std::string ln2 =
        builder.Op("layer_norm", p + "ln_2", {residual, ln2_g, ln2_b}, {}, options(stage));
    std::string w1 = weight("mlp.c_fc.weight", {d, 4 * d}, column);
    std::string b1 = weight("mlp.c_fc.bias", {4 * d}, column_bias);
    std::string fc_mm = builder.Matmul(p + "fc_mm", ln2, w1, false, false, options(stage));
    std::string fc = builder.BiasAdd(p + "fc", fc_mm, b1, options(stage));
    std::string gelu = builder.Gelu(p + "gelu", fc, options(stage));
    std::string w2 = weight("mlp.c_proj.weight", {4 * d, d}, row);
    std::string b2 = weight("mlp.c_proj.bias", {d}, replicated);
    std::string fc2_mm = builder.Matmul(p + "fc2_mm", gelu, w2, false, false, options(stage));
    std::string fc2 = builder.BiasAdd(p + "fc2", fc2_mm, b2, options(stage, {"S(0)", "B"}));
    x = builder.Add(p + "residual_2", residual, fc2, options(stage));
  }
  builder.Fetch(x);
  job::Job job = builder.Build();
  // Variables and the input live on their stage's [data, tensor] hierarchy.
  for (job::Variable& variable_proto : *job.mutable_variables()) {
    variable_proto.mutable_placement()->add_hierarchy(data);
    variable_proto.mutable_placement()->add_hierarchy(tensor);
  }
  for (job::Input& input : *job.mutable_inputs()) {
    input.mutable_placement()->add_hierarchy(data);
    input.mutable_placement()->add_hierarchy(tensor);
  }
  return job;
}

}  // namespace loom::bench
