#include "tools/loom-gpt/gpt_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/job_builder.h"
#include "core/data_type.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "kernels/cpu/counter_random.h"

namespace loom::gpt {
namespace {

// The SBPs of one tensor on a stage's placement. The stage's devices are one axis, or two:
// [dp, tp] (tensor parallel) or [dp / ep, ep] (expert parallel inside data parallel). The first
// axis always splits the batch; the second is the "model" axis: tensor-parallel splits, or the
// experts' split (activations split the batch there too).
class Layout {
 public:
  explicit Layout(const GptConfig& config)
      : data_parallel_(config.data_parallel),
        tensor_parallel_(config.tensor_parallel),
        expert_parallel_(config.expert_parallel) {}

  bool two_dimensional() const {
    return (data_parallel_ > 1 && tensor_parallel_ > 1) ||
           (expert_parallel_ > 1 && expert_parallel_ < data_parallel_);
  }

  std::vector<int64_t> Hierarchy() const {
    if (!two_dimensional()) return {};
    if (tensor_parallel_ > 1) return {data_parallel_, tensor_parallel_};
    return {data_parallel_ / expert_parallel_, expert_parallel_};
  }

  std::vector<std::string> Sbp(const std::string& data_axis, const std::string& model_axis) const {
    if (two_dimensional()) return {data_axis, model_axis};
    if (tensor_parallel_ > 1) return {model_axis};
    return {data_axis};
  }

  // A variable: replicated over data-parallel ranks.
  std::vector<std::string> Variable(const std::string& model_axis) const {
    return Sbp("B", model_axis);
  }
  // An activation: split by samples over data-parallel ranks, with `model_axis` on the
  // tensor-parallel axis (on an expert-parallel axis, split by samples too).
  std::vector<std::string> Activation(const std::string& model_axis = "B") const {
    return Sbp("S(0)", tensor_parallel_ > 1 ? model_axis : "S(0)");
  }
  // An expert variable ([E, ...]): split over the expert-parallel group, replicated across groups.
  std::vector<std::string> ExpertVariable() const {
    if (expert_parallel_ == 1) return Variable("B");
    if (two_dimensional()) return {"B", "S(0)"};
    return {"S(0)"};
  }
  // An expert-major activation ([E, B, ...]): experts split over the group, the batch (axis 1)
  // across groups.
  std::vector<std::string> ExpertActivation() const {
    if (expert_parallel_ == 1) return Sbp("S(1)", "B");
    if (two_dimensional()) return {"S(1)", "S(0)"};
    return {"S(0)"};
  }

 private:
  int64_t data_parallel_;
  int64_t tensor_parallel_;
  int64_t expert_parallel_;
};

std::vector<std::string> StageDevices(const GptConfig& config, int64_t stage) {
  const int64_t per_stage = config.data_parallel * config.tensor_parallel;
  const int64_t group = GptGroupOfStage(config, stage);
  std::vector<std::string> devices;
  for (int64_t i = group * per_stage; i < (group + 1) * per_stage; ++i) {
    devices.push_back(GptDeviceName(config, i));
  }
  return devices;
}

void SetPlacement(job::Placement* placement, const std::vector<std::string>& devices,
                  const std::vector<int64_t>& hierarchy) {
  placement->Clear();
  for (const std::string& device : devices) placement->add_devices(device);
  for (int64_t extent : hierarchy) placement->add_hierarchy(extent);
}

int64_t StageOfLayer(const GptConfig& config, int64_t layer) {
  int64_t stage = 0;
  while (stage + 1 < GptStageCount(config) && GptFirstLayer(config, stage + 1) <= layer) ++stage;
  return stage;
}

// Writes the ops of the model; `Options(stage, hint)` gives each op its stage and output hint.
class GptGraph {
 public:
  GptGraph(const GptConfig& config, JobBuilder* builder)
      : config_(config), layout_(config), builder_(*builder) {}

  // Returns the loss tensor.
  std::string Build() {
    const int last = static_cast<int>(GptStageCount(config_) - 1);
    const std::string tokens = builder_.Op("embedding", "wte.lookup", {"wte", "x"}, {}, Options(0));
    std::string h = builder_.Add("h.in", tokens, "wpe", Options(0, layout_.Activation()));
    for (int64_t layer = 0; layer < config_.layers; ++layer) {
      h = Block(layer, h, static_cast<int>(StageOfLayer(config_, layer)));
    }
    const std::string normed = LayerNorm("ln_f", h, last);
    const std::string logits =
        builder_.Matmul("lm_head", normed, "lm_head.weight", false, false, Options(last));
    const std::string token_loss =
        builder_.Op("sparse_cross_entropy", "token_loss", {logits, "y"}, {}, Options(last));
    if (aux_losses_.empty())
      return builder_.Op("reduce_mean", "loss", {token_loss}, {}, Options(last));
    const std::string cross_entropy =
        builder_.Op("reduce_mean", "cross_entropy", {token_loss}, {}, Options(last));
    return builder_.Add("loss", cross_entropy, Sum("moe.aux_loss", aux_losses_, last),
                        Options(last));
  }

  // With experts (after Build): the step's dropped assignments ([]) and assignments per expert
  // ([E]), summed over the MoE layers (on the last stage).
  std::vector<std::string> MoeCounts() {
    if (dropped_counts_.empty()) return {};
    const int last = static_cast<int>(GptStageCount(config_) - 1);
    return {Sum("moe.dropped", dropped_counts_, last),
            Sum("moe.tokens_per_expert", expert_counts_, last)};
  }

 private:
  JobBuilder::OpOptions Options(int stage, std::vector<std::string> hint = {}) const {
    JobBuilder::OpOptions options;
    if (GptStageCount(config_) > 1) options.stage = stage;
    if (!hint.empty()) options.output_sbp.push_back(std::move(hint));
    options.block = block_;
    return options;
  }

  std::string LayerNorm(const std::string& name, const std::string& x, int stage) {
    return builder_.Op("layer_norm", name, {x, name + ".weight", name + ".bias"},
                       {{"epsilon", FloatAttribute(config_.layer_norm_epsilon)}}, Options(stage));
  }

  // x @ W + b, named `name` (the matmul is `name`.matmul).
  std::string Linear(const std::string& name, const std::string& x, int stage,
                     std::vector<std::string> hint = {}) {
    const std::string product =
        builder_.Matmul(name + ".matmul", x, name + ".weight", false, false, Options(stage));
    return builder_.BiasAdd(name, product, name + ".bias", Options(stage, std::move(hint)));
  }

  // [B, T, D] -> [B, H, T, Dh].
  std::string SplitHeads(const std::string& name, const std::string& x, int stage) {
    const int64_t head_width = config_.width / config_.heads;
    const std::string heads =
        builder_.Op("reshape", name + ".heads", {x},
                    {{"shape", IntListAttribute({-1, config_.context, config_.heads, head_width})}},
                    Options(stage));
    return builder_.Op("transpose", name + ".transposed", {heads},
                       {{"permutation", IntListAttribute({0, 2, 1, 3})}}, Options(stage));
  }

  // One transformer block, its ops in the recomputation block named like them ("h.<layer>.").
  std::string Block(int64_t layer, const std::string& h, int stage) {
    block_ = absl::StrCat("h.", layer, ".");
    std::string output = BlockOps(layer, h, stage);
    block_.clear();
    return output;
  }

  std::string BlockOps(int64_t layer, const std::string& h, int stage) {
    const std::string prefix = absl::StrCat("h.", layer, ".");
    const std::string a = LayerNorm(prefix + "ln_1", h, stage);
    // Column parallel: q, k, v split on their output axis, so each rank holds whole heads.
    const std::vector<std::string> column_split = layout_.Activation("S(2)");
    std::string qkv[3];
    for (int i = 0; i < 3; ++i) {
      const std::string name = prefix + "attn." + "qkv"[i];
      qkv[i] = SplitHeads(name, Linear(name, a, stage, column_split), stage);
    }
    const double scale = 1.0 / std::sqrt(static_cast<double>(config_.width / config_.heads));
    const std::string attention =
        builder_.Op("causal_attention", prefix + "attn.core", {qkv[0], qkv[1], qkv[2]},
                    {{"scale", FloatAttribute(scale)}}, Options(stage, layout_.Activation("S(1)")));
    const std::string merged_heads =
        builder_.Op("transpose", prefix + "attn.core.transposed", {attention},
                    {{"permutation", IntListAttribute({0, 2, 1, 3})}}, Options(stage));
    const std::string merged = builder_.Op(
        "reshape", prefix + "attn.merged", {merged_heads},
        {{"shape", IntListAttribute({-1, config_.context, config_.width})}}, Options(stage));
    // Row parallel: the matmul gives partial sums, reduced before the bias (Megatron).
    const std::string projected =
        Linear(prefix + "attn.c_proj", merged, stage, layout_.Activation());
    const std::string after_attention =
        builder_.Add(prefix + "attn.residual", h, projected, Options(stage, layout_.Activation()));
    const std::string m = LayerNorm(prefix + "ln_2", after_attention, stage);
    if (IsMoeLayer(config_, layer)) {
      return builder_.Add(prefix + "moe.residual", after_attention, Moe(prefix + "moe.", m, stage),
                          Options(stage, layout_.Activation()));
    }
    const std::string hidden =
        builder_.Gelu(prefix + "mlp.gelu", Linear(prefix + "mlp.c_fc", m, stage, column_split),
                      Options(stage, column_split));
    const std::string mlp_out = Linear(prefix + "mlp.c_proj", hidden, stage, layout_.Activation());
    return builder_.Add(prefix + "mlp.residual", after_attention, mlp_out,
                        Options(stage, layout_.Activation()));
  }

  // The MoE MLP of one block: [B, T, D] -> [B, T, D]. Tokens are routed within their sequence
  // (moe_route), gathered into per-expert slots [B, E, C, D] (moe_dispatch), made expert-major
  // [E, B * C, D] for one batched matmul per expert layer, and scattered back weighted
  // (moe_combine). With expert parallelism the expert-major tensors are split on E: the compiler
  // boxes batch-split into expert-split (and back) with all-to-alls.
  std::string Moe(const std::string& prefix, const std::string& x, int stage) {
    const int64_t E = config_.experts, D = config_.width;
    // The router stays float32 under mixed precision: rounding its logits to bfloat16 would tie
    // and reorder experts, changing which tokens go where (Switch Transformer, "selective
    // precision").
    JobBuilder::OpOptions router_options = Options(stage, layout_.Activation());
    router_options.keep_float32 = true;
    const std::string logits = builder_.Matmul(prefix + "router", x, prefix + "router.weight",
                                               false, false, router_options);
    const std::string probabilities =
        builder_.Op("softmax", prefix + "router.softmax", {logits}, {}, Options(stage));
    const std::string slot_token = prefix + "route.slot_token";
    const std::string slot_weight = prefix + "route.slot_weight";
    const std::string expert_fraction = prefix + "route.expert_fraction";
    const std::string dropped = prefix + "route.dropped";
    JobBuilder::OpOptions route_options = Options(stage);
    route_options.output_sbp.assign(4, layout_.Activation());
    builder_.Op("moe_route", prefix + "route", {probabilities},
                {{"k", IntAttribute(config_.top_k)},
                 {"capacity_factor", FloatAttribute(config_.capacity_factor)}},
                route_options, {slot_token, slot_weight, expert_fraction, dropped});
    const std::string dispatched =
        builder_.Op("moe_dispatch", prefix + "dispatch", {x, slot_token}, {}, Options(stage));
    // [B, E, C, D] -> [E, B, C, D] -> [E, B * C, D]: expert-major, split on E.
    const std::string expert_major = builder_.Op("transpose", prefix + "experts.in", {dispatched},
                                                 {{"permutation", IntListAttribute({1, 0, 2, 3})}},
                                                 Options(stage, layout_.ExpertActivation()));
    const std::string rows = builder_.Op("reshape", prefix + "experts.rows", {expert_major},
                                         {{"shape", IntListAttribute({E, -1, D})}},
                                         Options(stage, layout_.ExpertActivation()));
    const std::string hidden =
        builder_.Gelu(prefix + "experts.gelu", ExpertLinear(prefix + "experts.c_fc", rows, stage),
                      Options(stage));
    const std::string out = ExpertLinear(prefix + "experts.c_proj", hidden, stage);
    const std::string slots = builder_.Op(
        "reshape", prefix + "experts.slots", {out},
        {{"shape", IntListAttribute({E, config_.batch / config_.micro_batches, -1, D})}},
        Options(stage));
    const std::string batch_major =
        builder_.Op("transpose", prefix + "experts.out", {slots},
                    {{"permutation", IntListAttribute({1, 0, 2, 3})}}, Options(stage));
    const std::string combined = builder_.Op(
        "moe_combine", prefix + "combine", {batch_major, slot_token, slot_weight},
        {{"tokens", IntAttribute(config_.context)}}, Options(stage, layout_.Activation()));

    // Switch Transformer load balancing, per sequence: E * sum_e f_e * P_e; the mean over the
    // sequences of the batch.
    const std::string mean_probability =
        builder_.Op("reduce_mean", prefix + "aux.mean_probability", {probabilities},
                    {{"axes", IntListAttribute({1})}}, Options(stage));
    const std::string product =
        builder_.Op("multiply", prefix + "aux.product", {expert_fraction, mean_probability}, {},
                    Options(stage));
    const std::string per_sequence =
        builder_.Op("reduce_sum", prefix + "aux.per_sequence", {product},
                    {{"axes", IntListAttribute({1})}}, Options(stage));
    const std::string mean =
        builder_.Op("reduce_mean", prefix + "aux.mean", {per_sequence}, {}, Options(stage));
    // Counts for the step's report: assignments over capacity, and assignments per expert.
    dropped_counts_.push_back(
        builder_.Op("reduce_sum", prefix + "dropped", {dropped}, {}, Options(stage)));
    const std::string assignments = builder_.Op(
        "scale", prefix + "assignments", {expert_fraction},
        {{"scale", FloatAttribute(static_cast<double>(config_.top_k * config_.context))}},
        Options(stage));
    expert_counts_.push_back(builder_.Op("reduce_sum", prefix + "tokens_per_expert", {assignments},
                                         {{"axes", IntListAttribute({0})}}, Options(stage)));
    aux_losses_.push_back(builder_.Op(
        "scale", prefix + "aux.loss", {mean},
        {{"scale", FloatAttribute(config_.aux_loss_coefficient * static_cast<double>(E))}},
        Options(stage)));
    return combined;
  }

  // x [E, N, K] @ weight [E, K, M] + bias [E, M] (as [E, 1, M]).
  std::string ExpertLinear(const std::string& name, const std::string& x, int stage) {
    const std::string product = builder_.Matmul(name + ".matmul", x, name + ".weight", false, false,
                                                Options(stage, layout_.ExpertActivation()));
    const std::string bias =
        builder_.Op("reshape", name + ".bias.rows", {name + ".bias"},
                    {{"shape", IntListAttribute({config_.experts, 1, -1})}}, Options(stage));
    return builder_.Add(name, product, bias, Options(stage, layout_.ExpertActivation()));
  }

  // a + b + ... as a chain of adds named `name`.0, `name`.1, ... (the last is `name`).
  std::string Sum(const std::string& name, const std::vector<std::string>& terms, int stage) {
    std::string total = terms.front();
    for (size_t i = 1; i < terms.size(); ++i) {
      total = builder_.Add(i + 1 == terms.size() ? name : absl::StrCat(name, ".", i), total,
                           terms[i], Options(stage));
    }
    if (terms.size() == 1) {
      total = builder_.Op("identity", name, {total}, {}, Options(stage));
    }
    return total;
  }

  const GptConfig& config_;
  Layout layout_;
  JobBuilder& builder_;
  // The block (Op.block) of the ops being written; empty outside the transformer blocks.
  std::string block_;
  std::vector<std::string> aux_losses_;
  std::vector<std::string> dropped_counts_;
  std::vector<std::string> expert_counts_;
};

}  // namespace

std::string GptDeviceName(const GptConfig& config, int64_t index) {
  if (config.devices_per_node <= 0) return absl::StrCat(config.device_type, ":", index);
  return absl::StrCat("node", index / config.devices_per_node, "/", config.device_type, ":",
                      index % config.devices_per_node);
}

bool IsMoeLayer(const GptConfig& config, int64_t layer) {
  return config.experts > 0 && std::find(config.moe_layers.begin(), config.moe_layers.end(),
                                         layer) != config.moe_layers.end();
}

int64_t GptStagesPerGroup(const GptConfig& config) {
  return config.schedule == job::ZERO_BUBBLE_V ? 2 : config.virtual_stages;
}

int64_t GptStageCount(const GptConfig& config) {
  return config.pipeline_stages * GptStagesPerGroup(config);
}

int64_t GptGroupOfStage(const GptConfig& config, int64_t stage) {
  if (config.schedule == job::ZERO_BUBBLE_V && stage >= config.pipeline_stages) {
    return 2 * config.pipeline_stages - 1 - stage;
  }
  return stage % config.pipeline_stages;
}

int64_t GptDeviceCount(const GptConfig& config) {
  return config.pipeline_stages * config.data_parallel * config.tensor_parallel;
}

int64_t GptFirstLayer(const GptConfig& config, int64_t stage) {
  const int64_t base = config.layers / GptStageCount(config);
  const int64_t extra = config.layers % GptStageCount(config);
  return stage * base + std::min(stage, extra);
}

std::vector<GptParameter> GptParameters(const GptConfig& config) {
  const int64_t V = config.vocab, T = config.context, D = config.width, F = config.mlp_width;
  const double std = 0.02;
  const double projection_std = 0.02 / std::sqrt(2.0 * static_cast<double>(config.layers));
  const int last = static_cast<int>(GptStageCount(config) - 1);
  std::vector<GptParameter> parameters;
  auto add = [&](std::string name, std::vector<int64_t> shape, ParameterInit init, double init_std,
                 std::string tensor_parallel_sbp, int stage) {
    parameters.push_back(GptParameter{std::move(name), std::move(shape), init, init_std,
                                      std::move(tensor_parallel_sbp), stage});
  };
  auto add_expert = [&](std::string name, std::vector<int64_t> shape, ParameterInit init,
                        double init_std, int stage) {
    add(std::move(name), std::move(shape), init, init_std, "B", stage);
    parameters.back().expert = true;
  };
  add("wte", {V, D}, ParameterInit::kNormal, std, "B", 0);
  add("wpe", {T, D}, ParameterInit::kNormal, std, "B", 0);
  for (int64_t layer = 0; layer < config.layers; ++layer) {
    const std::string p = absl::StrCat("h.", layer, ".");
    const int stage = static_cast<int>(StageOfLayer(config, layer));
    add(p + "ln_1.weight", {D}, ParameterInit::kOnes, 0, "B", stage);
    add(p + "ln_1.bias", {D}, ParameterInit::kZeros, 0, "B", stage);
    for (const char* name : {"q", "k", "v"}) {
      add(absl::StrCat(p, "attn.", name, ".weight"), {D, D}, ParameterInit::kNormal, std, "S(1)",
          stage);
      add(absl::StrCat(p, "attn.", name, ".bias"), {D}, ParameterInit::kZeros, 0, "S(0)", stage);
    }
    add(p + "attn.c_proj.weight", {D, D}, ParameterInit::kNormal, projection_std, "S(0)", stage);
    add(p + "attn.c_proj.bias", {D}, ParameterInit::kZeros, 0, "B", stage);
    add(p + "ln_2.weight", {D}, ParameterInit::kOnes, 0, "B", stage);
    add(p + "ln_2.bias", {D}, ParameterInit::kZeros, 0, "B", stage);
    if (IsMoeLayer(config, layer)) {
      const int64_t E = config.experts;
      add(p + "moe.router.weight", {D, E}, ParameterInit::kNormal, std, "B", stage);
      add_expert(p + "moe.experts.c_fc.weight", {E, D, F}, ParameterInit::kNormal, std, stage);
      add_expert(p + "moe.experts.c_fc.bias", {E, F}, ParameterInit::kZeros, 0, stage);
      add_expert(p + "moe.experts.c_proj.weight", {E, F, D}, ParameterInit::kNormal, projection_std,
                 stage);
      add_expert(p + "moe.experts.c_proj.bias", {E, D}, ParameterInit::kZeros, 0, stage);
      continue;
    }
    add(p + "mlp.c_fc.weight", {D, F}, ParameterInit::kNormal, std, "S(1)", stage);
    add(p + "mlp.c_fc.bias", {F}, ParameterInit::kZeros, 0, "S(0)", stage);
    add(p + "mlp.c_proj.weight", {F, D}, ParameterInit::kNormal, projection_std, "S(0)", stage);
    add(p + "mlp.c_proj.bias", {D}, ParameterInit::kZeros, 0, "B", stage);
  }
  add("ln_f.weight", {D}, ParameterInit::kOnes, 0, "B", last);
  add("ln_f.bias", {D}, ParameterInit::kZeros, 0, "B", last);
  add("lm_head.weight", {D, V}, ParameterInit::kNormal, std, "B", last);
  return parameters;
}

int64_t ParameterSeed(const GptConfig& config, int64_t position) {
  return config.seed * 65536 + position;
}

float InitialNormalValue(double std, int64_t seed, int64_t index) {
  const uint64_t key = cpu::RandomStreamKey(static_cast<uint64_t>(seed), 0);
  return static_cast<float>(std * cpu::StandardNormal(key, static_cast<uint64_t>(index)));
}

absl::StatusOr<job::Job> BuildGptJob(const GptConfig& config) {
  if (absl::Status status = ValidateGptConfig(config); !status.ok()) return status;
  const Layout layout(config);
  const int64_t stages = GptStageCount(config);
  const int last = static_cast<int>(stages - 1);

  JobBuilder builder("gpt");
  std::vector<std::string> all_devices;
  for (int64_t i = 0; i < GptDeviceCount(config); ++i) {
    all_devices.push_back(GptDeviceName(config, i));
  }
  builder.SetPlacement(all_devices, stages == 1 ? layout.Hierarchy() : std::vector<int64_t>{});
  if (stages > 1) {
    for (int64_t stage = 0; stage < stages; ++stage) {
      builder.AddStagePlacement(StageDevices(config, stage), layout.Hierarchy());
    }
  }
  builder.SetSteps(config.steps);
  GptGraph graph(config, &builder);
  const std::string loss = graph.Build();
  builder.Fetch(loss);
  for (const std::string& count : graph.MoeCounts()) builder.Fetch(count);
  // A step reports its dropped assignments, not their mean over the micro-batches.
  if (config.experts > 0) builder.SumOverStep("moe.dropped");
  job::Job job = builder.Build();

  // Variables and inputs are placed on their stage (with its hierarchy) explicitly.
  auto place = [&](auto* tensor, int stage) {
    if (stages > 1) {
      SetPlacement(tensor->mutable_placement(), StageDevices(config, stage), layout.Hierarchy());
    }
  };
  const std::vector<GptParameter> parameters = GptParameters(config);
  for (size_t position = 0; position < parameters.size(); ++position) {
    const GptParameter& parameter = parameters[position];
    job::Variable* variable = job.add_variables();
    variable->set_name(parameter.name);
    for (int64_t extent : parameter.shape) variable->add_shape(extent);
    switch (parameter.init) {
      case ParameterInit::kNormal:
        *variable->mutable_initializer() =
            NormalInit(parameter.std, ParameterSeed(config, static_cast<int64_t>(position)));
        break;
      case ParameterInit::kZeros:
        *variable->mutable_initializer() = ConstantInit(0.0);
        break;
      case ParameterInit::kOnes:
        *variable->mutable_initializer() = ConstantInit(1.0);
        break;
    }
    for (const std::string& sbp : parameter.expert
                                      ? layout.ExpertVariable()
                                      : layout.Variable(parameter.tensor_parallel_sbp)) {
      variable->add_sbp(sbp);
    }
    place(variable, parameter.stage);
  }
  // The token inputs x and y (targets): the training data, and with evaluation the held-out data.
  auto fill_dataset = [&config](job::Input* input, const std::vector<std::string>& paths,
                                const std::vector<double>& weights, bool targets) {
    job::TokenDataset* dataset = input->mutable_token_dataset();
    for (size_t index = 0; index < paths.size(); ++index) {
      job::TokenSource* source = dataset->add_sources();
      source->add_paths(paths[index]);
      source->set_format(config.data_format);
      if (!weights.empty()) source->set_weight(weights[index]);
    }
    if (config.end_of_text.has_value()) dataset->set_end_of_text(*config.end_of_text);
    dataset->set_in_order(config.data_in_order);
    dataset->set_targets(targets);
    input->set_seed(config.data_seed);
  };
  for (const auto& [name, targets, stage] :
       {std::tuple<const char*, bool, int>{"x", false, 0}, {"y", true, last}}) {
    job::Input* input = job.add_inputs();
    input->set_name(name);
    input->add_shape(config.batch);
    input->add_shape(config.context);
    input->set_data_type(plan::INT32);
    for (const std::string& sbp : layout.Activation()) input->add_sbp(sbp);
    fill_dataset(input, config.data_paths, config.data_weights, targets);
    place(input, stage);
    if (config.eval_every > 0) {
      job::Input* held_out = job.mutable_evaluation()->add_inputs();
      held_out->set_name(name);
      fill_dataset(held_out, config.eval_data_paths, {}, targets);
    }
  }
  if (config.eval_every > 0) {
    job.mutable_evaluation()->set_every_steps(config.eval_every);
    // The MoE GPT's loss adds the load-balancing loss: evaluate the cross-entropy alone.
    if (config.experts > 0) job.mutable_evaluation()->set_loss("cross_entropy");
  }

  job.set_loss(loss);
  job::AdamWOptimizer* adamw = job.mutable_optimizer()->mutable_adamw();
  adamw->set_learning_rate(config.learning_rate);
  adamw->set_beta1(config.beta1);
  adamw->set_beta2(config.beta2);
  adamw->set_epsilon(config.adam_epsilon);
  adamw->set_weight_decay(config.weight_decay);
  if (config.lr_warmup_steps > 0 || config.lr_decay != "constant") {
    job::LearningRateSchedule* schedule = job.mutable_optimizer()->mutable_learning_rate_schedule();
    schedule->set_warmup_steps(config.lr_warmup_steps);
    schedule->set_decay(config.lr_decay == "cosine"   ? job::LearningRateSchedule::DECAY_COSINE
                        : config.lr_decay == "linear" ? job::LearningRateSchedule::DECAY_LINEAR
                                                      : job::LearningRateSchedule::DECAY_CONSTANT);
    schedule->set_decay_steps(config.lr_decay_steps > 0 ? config.lr_decay_steps : config.steps);
    schedule->set_min_learning_rate(config.min_learning_rate);
  }
  if (config.weight_decay_on == "matrices") {
    job::ParameterGroup* group = job.mutable_optimizer()->add_parameter_groups();
    group->set_name("no_decay");
    for (const char* pattern : {"wte", "wpe", "*.bias", "*ln_*"}) group->add_variables(pattern);
    group->set_weight_decay(0);
    if (config.no_decay_lr_scale != 1.0) group->set_learning_rate_scale(config.no_decay_lr_scale);
  }
  if (config.micro_batches > 1)
    job.set_num_micro_batches(static_cast<int32_t>(config.micro_batches));
  if (stages > 1) job.set_pipeline_schedule(config.schedule);
  if (config.max_grad_norm > 0) job.set_max_grad_norm(config.max_grad_norm);
  if (config.recompute != job::RECOMPUTE_NONE) job.set_recompute(config.recompute);
  job.set_offload_activations(config.offload_activations);
  if (config.zero_stage != 0) job.set_zero_stage(static_cast<int32_t>(config.zero_stage));
  if (config.matmul_data_type != plan::FLOAT32) job.set_matmul_data_type(config.matmul_data_type);
  return job;
}

std::string GptConfigJson(const GptConfig& config) {
  std::string json = absl::StrFormat(
      "{\"vocab\": %d, \"context\": %d, \"width\": %d, \"layers\": %d, \"heads\": %d, "
      "\"mlp_width\": %d, \"eps\": %g",
      config.vocab, config.context, config.width, config.layers, config.heads, config.mlp_width,
      config.layer_norm_epsilon);
  if (config.experts > 0) {
    absl::StrAppendFormat(&json,
                          ", \"experts\": %d, \"moe_layers\": [%s], \"top_k\": %d, "
                          "\"capacity_factor\": %g, \"aux_loss_coefficient\": %g",
                          config.experts, absl::StrJoin(config.moe_layers, ", "), config.top_k,
                          config.capacity_factor, config.aux_loss_coefficient);
  }
  return json + "}";
}

absl::Status WriteGptInitialWeights(const GptConfig& config, const std::string& path) {
  if (absl::Status status = ValidateGptConfig(config); !status.ok()) return status;
  checkpoint::Checkpoint file;
  const std::vector<GptParameter> parameters = GptParameters(config);
  for (size_t position = 0; position < parameters.size(); ++position) {
    const GptParameter& parameter = parameters[position];
    HostTensor tensor;
    tensor.data_type = plan::FLOAT32;
    tensor.shape = Shape(parameter.shape);
    std::vector<float> values(static_cast<size_t>(tensor.shape.NumElements()));
    const int64_t seed = ParameterSeed(config, static_cast<int64_t>(position));
    for (size_t i = 0; i < values.size(); ++i) {
      switch (parameter.init) {
        case ParameterInit::kNormal:
          values[i] = InitialNormalValue(parameter.std, seed, static_cast<int64_t>(i));
          break;
        case ParameterInit::kZeros:
          values[i] = 0.0f;
          break;
        case ParameterInit::kOnes:
          values[i] = 1.0f;
          break;
      }
    }
    tensor.bytes.resize(values.size() * sizeof(float));
    std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
    file.tensors.emplace(parameter.name, std::move(tensor));
  }
  file.metadata = {
      {"model", "gpt"}, {"seed", absl::StrCat(config.seed)}, {"config", GptConfigJson(config)}};
  return checkpoint::WriteSafetensors(path, file);
}

}  // namespace loom::gpt
