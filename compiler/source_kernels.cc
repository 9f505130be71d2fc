#include "compiler/source_kernels.h"

#include "absl/strings/str_cat.h"
#include "compiler/kernel_attributes.h"
#include "compiler/optimizer_settings.h"
#include "compiler/token_inputs.h"

namespace loom::compiler {
namespace {

// The "random" kernel drawing from a distribution.
void SetNormal(plan::KernelConf* conf, const job::NormalInitializer& normal) {
  conf->set_op_type("random");
  (*conf->mutable_attributes())["distribution"].set_string_value("normal");
  SetFloat(conf, "mean", normal.mean());
  SetFloat(conf, "std", normal.std());
  SetInt(conf, "seed", normal.seed());
}
void SetUniform(plan::KernelConf* conf, const job::UniformInitializer& uniform) {
  conf->set_op_type("random");
  SetFloat(conf, "low", uniform.low());
  SetFloat(conf, "high", uniform.high());
  SetInt(conf, "seed", uniform.seed());
}

int64_t FirstStep(const LogicalGraph& graph) { return graph.first_step; }

}  // namespace

plan::KernelConf VariableInitializerKernel(const LogicalGraph& graph, const LogicalNode& node,
                                           const std::string& checkpoint_name,
                                           const std::vector<int64_t>& logical,
                                           const LocalWindow& window) {
  plan::KernelConf conf;
  if (graph.initial_state != nullptr) {
    return CheckpointSliceKernel(graph, checkpoint_name, logical, window);
  }
  auto window_attributes = [&] {
    SetIntList(&conf, "logical_shape", logical);
    SetIntList(&conf, "slice_begin", window.begin);
  };
  const job::Initializer& init = node.variable->initializer();
  switch (init.kind_case()) {
    case job::Initializer::kConstant:
      conf.set_op_type("fill");
      SetFloat(&conf, "value", init.constant());
      break;
    case job::Initializer::kNormal:
      SetNormal(&conf, init.normal());
      window_attributes();
      break;
    case job::Initializer::kUniform:
      SetUniform(&conf, init.uniform());
      window_attributes();
      break;
    default:
      break;
  }
  return conf;
}

plan::KernelConf CheckpointSliceKernel(const LogicalGraph& graph, const std::string& name,
                                       const std::vector<int64_t>& logical,
                                       const LocalWindow& window) {
  plan::KernelConf conf;
  conf.set_op_type("safetensors_slice");
  (*conf.mutable_attributes())["path"].set_string_value(graph.initial_state->path());
  (*conf.mutable_attributes())["tensor"].set_string_value(name);
  SetIntList(&conf, "logical_shape", logical);
  SetIntList(&conf, "slice_begin", window.begin);
  return conf;
}

absl::StatusOr<plan::KernelConf> InputKernel(const LogicalGraph& graph, const job::Input& input,
                                             const std::vector<int64_t>& logical,
                                             const LocalWindow& window) {
  plan::KernelConf conf;
  if (FirstStep(graph) > 0) SetInt(&conf, "first_step", FirstStep(graph));
  switch (input.source_case()) {
    case job::Input::kRandomNormal:
      SetNormal(&conf, input.random_normal());
      break;
    case job::Input::kRandomUniform:
      SetUniform(&conf, input.random_uniform());
      break;
    case job::Input::kRandomIntegersBelow:
      conf.set_op_type("random_integers");
      SetInt(&conf, "high", input.random_integers_below());
      SetInt(&conf, "seed", input.seed());
      break;
    case job::Input::kTokenFile:
    case job::Input::kTokenDataset: {
      // Rows are samples: this rank's window must cover whole sequences.
      if (window.begin[1] != 0 || window.shape.dimension(1) != logical[1]) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input.name(), "': a token input may be split only on its batch axis"));
      }
      plan::KernelConf tokens = TokenInputKernel(input);
      if (FirstStep(graph) > 0) SetInt(&tokens, "first_step", FirstStep(graph));
      // The n-th evaluation reads batch n of its data.
      if (input.evaluation()) SetInt(&tokens, "steps_per_batch", graph.evaluation_every_steps);
      SetInt(&tokens, "global_batch", logical[0]);
      SetInt(&tokens, "sequence", logical[1]);
      SetInt(&tokens, "sample_begin", window.begin[0]);
      SetInt(&tokens, "sample_count", window.shape.dimension(0));
      return tokens;
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' has no source"));
  }
  SetIntList(&conf, "logical_shape", logical);
  SetIntList(&conf, "slice_begin", window.begin);
  return conf;
}

plan::KernelConf OptimizerKernel(const LogicalGraph& graph, const LogicalNode& variable,
                                 std::vector<std::string>* state_names) {
  plan::KernelConf optimizer;
  if (FirstStep(graph) > 0) SetInt(&optimizer, "first_step", FirstStep(graph));
  const job::Optimizer& settings = *graph.optimizer;
  const job::ParameterGroup* group = variable.parameter_group >= 0
                                         ? &settings.parameter_groups(variable.parameter_group)
                                         : nullptr;
  const double scale =
      group != nullptr && group->has_learning_rate_scale() ? group->learning_rate_scale() : 1.0;
  const double weight_decay = group != nullptr && group->has_weight_decay()
                                  ? group->weight_decay()
                                  : WeightDecayOf(settings);
  SetFloat(&optimizer, "lr", LearningRateOf(settings) * scale);
  SetFloat(&optimizer, "weight_decay", weight_decay);
  const LearningRateSchedule& schedule = graph.learning_rate_schedule;
  if (schedule.warmup_steps > 0) SetInt(&optimizer, "lr_warmup_steps", schedule.warmup_steps);
  if (schedule.decay != LearningRateDecay::kConstant) {
    (*optimizer.mutable_attributes())["lr_decay"].set_string_value(
        std::string(LearningRateDecayName(schedule.decay)));
    SetInt(&optimizer, "lr_decay_steps", schedule.decay_steps);
    SetFloat(&optimizer, "lr_min_ratio", schedule.min_ratio);
  }
  if (settings.has_sgd()) {
    const job::SgdOptimizer& sgd = settings.sgd();
    optimizer.set_op_type("sgd");
    SetFloat(&optimizer, "momentum", sgd.momentum());
    SetFloat(&optimizer, "dampening", sgd.dampening());
    (*optimizer.mutable_attributes())["nesterov"].set_bool_value(sgd.nesterov());
    *state_names = {"optimizer.momentum_buffer."};
  } else {
    const job::AdamWOptimizer& adamw = settings.adamw();
    optimizer.set_op_type("adamw");
    SetFloat(&optimizer, "beta1", adamw.beta1() != 0 ? adamw.beta1() : 0.9);
    SetFloat(&optimizer, "beta2", adamw.beta2() != 0 ? adamw.beta2() : 0.999);
    SetFloat(&optimizer, "epsilon", adamw.epsilon() != 0 ? adamw.epsilon() : 1e-8);
    *state_names = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};
  }
  for (std::string& state : *state_names) state += variable.name;
  return optimizer;
}

}  // namespace loom::compiler
