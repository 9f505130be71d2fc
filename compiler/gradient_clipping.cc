#include "compiler/gradient_clipping.h"

#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"

namespace loom::compiler {
namespace {

job::Op* AddOnceStepOp(job::Job* job, const std::string& name, const std::string& type,
                       std::vector<std::string> inputs, const job::Op* like) {
  job::Op* op = job->add_ops();
  op->set_name(name);
  op->set_type(type);
  for (std::string& input : inputs) op->add_inputs(std::move(input));
  op->add_outputs(name);
  op->set_once_per_step(true);
  op->set_backward(true);
  if (like != nullptr) {
    if (like->has_placement()) *op->mutable_placement() = like->placement();
    if (like->has_stage()) op->set_stage(like->stage());
  }
  return op;
}

}  // namespace

std::string UnclippedGradientName(absl::string_view gradient) {
  return absl::StrCat(gradient, "/unclipped");
}

absl::StatusOr<job::Job> AddGradientClipping(const job::Job& job, double max_norm) {
  if (!(max_norm > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_grad_norm must be positive, not ", max_norm));
  }
  job::Job result = job;
  // The op producing each tensor (position in result.ops()).
  absl::flat_hash_map<std::string, std::pair<int, int>> producer;
  for (int i = 0; i < result.ops_size(); ++i) {
    for (int o = 0; o < result.ops(i).outputs_size(); ++o) {
      producer[result.ops(i).outputs(o)] = {i, o};
    }
  }
  std::vector<std::string> squared_norms;
  std::vector<std::pair<std::string, int>> clipped;  // gradient name, producer op position
  for (const job::Variable& variable : job.variables()) {
    if (variable.frozen()) continue;
    const std::string gradient = absl::StrCat("grad/", variable.name());
    auto found = producer.find(gradient);
    if (found == producer.end()) continue;
    const std::string unclipped = UnclippedGradientName(gradient);
    result.mutable_ops(found->second.first)->set_outputs(found->second.second, unclipped);
    // Copy: adding ops may move result's ops.
    const job::Op like = result.ops(found->second.first);
    std::string name = absl::StrCat("clip/", variable.name(), "/squared_norm");
    AddOnceStepOp(&result, name, "squared_norm", {unclipped}, &like);
    squared_norms.push_back(name);
    clipped.emplace_back(variable.name(), found->second.first);
  }
  if (squared_norms.empty()) {
    return absl::InvalidArgumentError(
        "max_grad_norm is set, but no variable has a gradient to clip");
  }
  std::string total = squared_norms[0];
  for (size_t i = 1; i < squared_norms.size(); ++i) {
    const std::string name = i + 1 == squared_norms.size() ? std::string("clip/total_squared_norm")
                                                           : absl::StrCat("clip/partial_sum_", i);
    AddOnceStepOp(&result, name, "add", {total, squared_norms[i]}, nullptr);
    total = name;
  }
  job::Op* coefficient =
      AddOnceStepOp(&result, "clip/coefficient", "clip_coefficient", {total}, nullptr);
  (*coefficient->mutable_attributes())["max_norm"].set_float_value(max_norm);
  for (const auto& [variable, position] : clipped) {
    const job::Op like = result.ops(position);
    const std::string gradient = absl::StrCat("grad/", variable);
    job::Op* scale = AddOnceStepOp(&result, absl::StrCat("clip/", variable), "scale_by",
                                   {UnclippedGradientName(gradient), "clip/coefficient"}, &like);
    scale->set_outputs(0, gradient);
  }
  return result;
}

}  // namespace loom::compiler
