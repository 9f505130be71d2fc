// ValidateGptConfig (declared in gpt_model.h): every rule a GptConfig must meet, each refusal
// naming the setting (python/loom/models/gpt_config.py gives the same messages).
#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"
#include "core/learning_rate_schedule.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::gpt {
namespace {

absl::Status ConfigError(const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat("GPT config: ", message));
}

}  // namespace

absl::Status ValidateGptConfig(const GptConfig& config) {
  const std::pair<const char*, int64_t> positive[] = {
      {"vocab", config.vocab},
      {"context", config.context},
      {"width", config.width},
      {"layers", config.layers},
      {"heads", config.heads},
      {"mlp_width", config.mlp_width},
      {"batch", config.batch},
      {"steps", config.steps},
      {"data_parallel", config.data_parallel},
      {"tensor_parallel", config.tensor_parallel},
      {"pipeline_stages", config.pipeline_stages},
      {"virtual_stages", config.virtual_stages},
      {"micro_batches", config.micro_batches},
  };
  for (const auto& [name, value] : positive) {
    if (value < 1) return ConfigError(absl::StrCat(name, " must be >= 1, got ", value));
  }
  // The stage and device counts are products of numbers the user chose.
  if (!CheckedMultiply(config.pipeline_stages, GptStagesPerGroup(config)).has_value()) {
    return ConfigError(absl::StrCat("pipeline stages ", config.pipeline_stages, " x ",
                                    GptStagesPerGroup(config), " per device group overflow int64"));
  }
  const std::optional<int64_t> stage_devices =
      CheckedMultiply(config.data_parallel, config.tensor_parallel);
  if (!stage_devices.has_value() ||
      !CheckedMultiply(*stage_devices, config.pipeline_stages).has_value()) {
    return ConfigError(absl::StrCat(
        "devices pipeline_stages x data_parallel x tensor_parallel = ", config.pipeline_stages,
        " x ", config.data_parallel, " x ", config.tensor_parallel, " overflow int64"));
  }
  if (config.width % config.heads != 0) {
    return ConfigError(absl::StrCat("width ", config.width, " is not divisible by heads ",
                                    config.heads, "; choose heads dividing the width"));
  }
  if (config.heads % config.tensor_parallel != 0) {
    return ConfigError(
        absl::StrCat("heads ", config.heads, " is not divisible by the tensor-parallel degree ",
                     config.tensor_parallel, " (each rank holds whole attention heads)"));
  }
  if (config.mlp_width % config.tensor_parallel != 0) {
    return ConfigError(absl::StrCat("mlp_width ", config.mlp_width,
                                    " is not divisible by the tensor-parallel degree ",
                                    config.tensor_parallel));
  }
  if (config.experts < 0)
    return ConfigError(absl::StrCat("experts must be >= 0, got ", config.experts));
  if (config.expert_parallel < 1 || config.data_parallel % config.expert_parallel != 0) {
    return ConfigError(absl::StrCat("the expert-parallel degree ", config.expert_parallel,
                                    " must divide the data-parallel degree ", config.data_parallel,
                                    " (expert parallelism splits the experts over data-parallel "
                                    "ranks)"));
  }
  if (config.expert_parallel > 1 && config.experts == 0) {
    return ConfigError("expert parallelism needs experts (experts is 0)");
  }
  if (config.expert_parallel > 1 && config.tensor_parallel > 1) {
    return ConfigError("expert and tensor parallelism together are not supported; use one");
  }
  if (config.experts > 0) {
    if (config.moe_layers.empty()) return ConfigError("experts > 0 but no MoE layers given");
    for (int64_t layer : config.moe_layers) {
      if (layer < 0 || layer >= config.layers) {
        return ConfigError(
            absl::StrCat("MoE layer ", layer, " is not a block (0 to ", config.layers - 1, ")"));
      }
    }
    if (!std::isfinite(config.aux_loss_coefficient) || config.aux_loss_coefficient < 0) {
      return ConfigError(absl::StrCat("aux loss coefficient must be finite and >= 0, got ",
                                      config.aux_loss_coefficient));
    }
  }
  if (config.layers < GptStageCount(config)) {
    return ConfigError(absl::StrCat("layers ", config.layers, " < pipeline stages ",
                                    GptStageCount(config),
                                    ": every stage needs at least one block"));
  }
  if ((config.virtual_stages > 1) != (config.schedule == job::INTERLEAVED)) {
    return ConfigError(absl::StrCat("virtual_stages ", config.virtual_stages,
                                    config.virtual_stages > 1
                                        ? " needs the interleaved schedule"
                                        : ": the interleaved schedule needs virtual_stages >= 2"));
  }
  if (config.batch % (config.data_parallel * config.micro_batches) != 0) {
    return ConfigError(absl::StrCat("batch ", config.batch,
                                    " is not divisible by data_parallel x micro_batches = ",
                                    config.data_parallel, " x ", config.micro_batches));
  }
  if (!(config.layer_norm_epsilon >= 0) || !std::isfinite(config.layer_norm_epsilon)) {
    return ConfigError(absl::StrCat("layer-norm epsilon must be finite and >= 0, got ",
                                    config.layer_norm_epsilon));
  }
  if (!(config.learning_rate > 0) || !std::isfinite(config.learning_rate)) {
    return ConfigError(absl::StrCat("learning rate must be > 0, got ", config.learning_rate));
  }
  if (!(config.beta1 >= 0 && config.beta1 < 1) || !(config.beta2 >= 0 && config.beta2 < 1)) {
    return ConfigError(absl::StrCat("AdamW betas must be in [0, 1), got (", config.beta1, ", ",
                                    config.beta2, ")"));
  }
  if (!(config.adam_epsilon > 0)) {
    return ConfigError(absl::StrCat("AdamW epsilon must be > 0, got ", config.adam_epsilon));
  }
  if (!(config.weight_decay >= 0)) {
    return ConfigError(absl::StrCat("weight decay must be >= 0, got ", config.weight_decay));
  }
  if (config.lr_warmup_steps < 0 || config.lr_decay_steps < 0) {
    return ConfigError(absl::StrCat("learning-rate warmup and decay steps must be >= 0, got ",
                                    config.lr_warmup_steps, " and ", config.lr_decay_steps));
  }
  if (absl::StatusOr<LearningRateDecay> decay = ParseLearningRateDecay(config.lr_decay);
      !decay.ok()) {
    return ConfigError(std::string(decay.status().message()));
  }
  if (!(config.min_learning_rate >= 0 && config.min_learning_rate <= config.learning_rate)) {
    return ConfigError(absl::StrCat("the minimum learning rate must be in [0, lr], got ",
                                    config.min_learning_rate));
  }
  if (config.weight_decay_on != "all" && config.weight_decay_on != "matrices") {
    return ConfigError(absl::StrCat("weight decay applies to 'all' or 'matrices', got '",
                                    config.weight_decay_on, "'"));
  }
  if (!(config.no_decay_lr_scale >= 0) || !std::isfinite(config.no_decay_lr_scale)) {
    return ConfigError(absl::StrCat("the no-decay group's learning-rate scale must be >= 0, got ",
                                    config.no_decay_lr_scale));
  }
  if (!(config.max_grad_norm >= 0) || !std::isfinite(config.max_grad_norm)) {
    return ConfigError(
        absl::StrCat("max_grad_norm must be >= 0 (0: no clipping), got ", config.max_grad_norm));
  }
  if (config.data_paths.empty()) return ConfigError("no data (data_paths is empty)");
  for (const std::string& path : config.data_paths) {
    if (path.empty()) return ConfigError("a data path is empty");
  }
  if (!config.data_weights.empty() && config.data_weights.size() != config.data_paths.size()) {
    return ConfigError(absl::StrCat(config.data_weights.size(), " data weights for ",
                                    config.data_paths.size(), " data paths: give one per path"));
  }
  for (double weight : config.data_weights) {
    if (!(weight > 0) || !std::isfinite(weight)) {
      return ConfigError(absl::StrCat("data weights must be finite and > 0, got ", weight));
    }
  }
  if (config.eval_every < 0) {
    return ConfigError(
        absl::StrCat("eval_every must be >= 0 (0: no evaluation), got ", config.eval_every));
  }
  if ((config.eval_every > 0) != !config.eval_data_paths.empty()) {
    return ConfigError(config.eval_every > 0
                           ? "evaluation needs held-out data (eval_data_paths is empty)"
                           : "held-out data is given, but eval_every is 0");
  }
  for (const std::string& path : config.eval_data_paths) {
    if (path.empty()) return ConfigError("an evaluation data path is empty");
  }
  if (config.end_of_text.has_value()) {
    if (*config.end_of_text < 0) {
      return ConfigError(
          absl::StrCat("the end-of-text token must be >= 0, got ", *config.end_of_text));
    }
    if (*config.end_of_text >= config.vocab) {
      return ConfigError(absl::StrCat("the end-of-text token ", *config.end_of_text,
                                      " is not below vocab ", config.vocab));
    }
    if (config.data_format == "bytes" && *config.end_of_text > 255) {
      return ConfigError(absl::StrCat("the end-of-text token ", *config.end_of_text,
                                      " is not a byte (the data format is bytes)"));
    }
  }
  if (config.device_type != "cpu" && config.device_type != "cuda") {
    return ConfigError(
        absl::StrCat("device type must be \"cpu\" or \"cuda\", got \"", config.device_type, "\""));
  }
  if (config.data_format != "bytes" && config.data_format != "uint16" &&
      config.data_format != "uint32") {
    return ConfigError(
        absl::StrCat("data format must be \"bytes\", \"uint16\" or \"uint32\", got \"",
                     config.data_format, "\""));
  }
  if (config.data_format == "bytes" && config.vocab < 256) {
    return ConfigError(
        absl::StrCat("vocab ", config.vocab, " < 256: a byte token file has tokens up to 255"));
  }
  if (config.matmul_data_type != plan::FLOAT32 && config.matmul_data_type != plan::BFLOAT16) {
    return ConfigError(absl::StrCat("matmul data type must be float32 or bfloat16, got ",
                                    DataTypeName(config.matmul_data_type)));
  }
  if (config.zero_stage < 0 || config.zero_stage > 3) {
    return ConfigError(absl::StrCat("zero_stage must be 0, 1, 2 or 3, got ", config.zero_stage));
  }
  if (!job::PipelineSchedule_IsValid(config.schedule)) {
    return ConfigError(absl::StrCat("unknown pipeline schedule ", config.schedule));
  }
  return absl::OkStatus();
}

}  // namespace loom::gpt
