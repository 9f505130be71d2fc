#include "compiler/zero_sharding.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

// The hierarchy axes on which every input of the job (the evaluation's held-out inputs aside)
// splits its batch (tensor axis 0); none when there is no such input.
std::vector<bool> DataParallelAxes(const LogicalGraph& graph) {
  std::optional<std::vector<bool>> axes;
  for (const LogicalNode& node : graph.nodes) {
    if (node.kind != LogicalNode::Kind::kInput || node.evaluation) continue;
    const NdSbp& sbp = graph.tensor(node.outputs[0]).sbp;
    std::vector<bool> splits(sbp.size());
    for (size_t h = 0; h < sbp.size(); ++h) {
      splits[h] = sbp[h].is_split() && sbp[h].axis == 0 && node.placement.hierarchy()[h] > 1;
    }
    if (!axes.has_value()) {
      axes = std::move(splits);
      continue;
    }
    axes->resize(std::min(axes->size(), splits.size()));
    for (size_t h = 0; h < axes->size(); ++h) (*axes)[h] = (*axes)[h] && splits[h];
  }
  return axes.value_or(std::vector<bool>{});
}

// A once-per-step forward op computed from split variables alone whose signature takes them
// broadcast (a weight's bfloat16 cast: SBP inference, seeing the variables replicated, keeps
// them whole) computes on the shards instead where its definition allows the same split in and
// out, so that its output, no larger than its inputs, is what readers gather: the bfloat16 copy
// (2 bytes a parameter), not the float32 value. The same math: such an op is elementwise along
// the split axis.
void ComputeOnTheShards(LogicalGraph* graph) {
  for (LogicalNode& node : graph->nodes) {
    if (node.kind != LogicalNode::Kind::kOp || !node.once_per_step || node.backward ||
        node.evaluation || node.inputs.empty() || node.outputs.size() != 1) {
      continue;
    }
    LogicalTensor& output = graph->tensors[node.outputs[0]];
    // Variables on the op's placement, each element no narrower than its output's.
    bool from_variables = true;
    for (int input : node.inputs) {
      const LogicalTensor& tensor = graph->tensor(input);
      from_variables = from_variables &&
                       graph->nodes[tensor.producer].kind == LogicalNode::Kind::kVariable &&
                       graph->nodes[tensor.producer].placement == node.placement &&
                       DataTypeSize(tensor.type.data_type) >= DataTypeSize(output.type.data_type);
    }
    if (!from_variables) continue;
    for (int h = 0; h < node.placement.num_axes(); ++h) {
      const Sbp split = graph->tensor(node.inputs[0]).sbp[h];
      bool as_replicated = split.is_split() && output.sbp[h].is_broadcast();
      for (size_t i = 0; i < node.inputs.size() && as_replicated; ++i) {
        as_replicated =
            graph->tensor(node.inputs[i]).sbp[h] == split && node.input_sbp[i][h].is_broadcast();
      }
      if (!as_replicated) continue;
      const std::vector<SbpSignature> signatures =
          node.definition->SbpSignatures(node.context, node.placement.hierarchy()[h]);
      const bool allowed =
          std::any_of(signatures.begin(), signatures.end(), [&](const SbpSignature& signature) {
            return signature.outputs.size() == 1 && signature.outputs[0] == split &&
                   std::all_of(signature.inputs.begin(), signature.inputs.end(),
                               [&](const Sbp& input) { return input == split; });
          });
      if (!allowed) continue;
      for (NdSbp& input_sbp : node.input_sbp) input_sbp[h] = split;
      output.sbp[h] = split;
    }
  }
}

}  // namespace

absl::Status ShardOverDataParallel(const job::Job& job, LogicalGraph* graph) {
  const int stage = job.zero_stage();
  if (stage == 0) return absl::OkStatus();
  if (stage < 0 || stage > 3) {
    return absl::InvalidArgumentError(absl::StrCat("zero_stage must be 0, 1, 2 or 3, not ", stage));
  }
  if (job.loss().empty() || graph->optimizer == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "zero_stage is ", stage, ", but the job trains nothing (no loss and optimizer)"));
  }
  const std::vector<bool> data_parallel = DataParallelAxes(*graph);
  for (LogicalNode& node : graph->nodes) {
    if (node.kind != LogicalNode::Kind::kVariable || node.gradient < 0) continue;
    LogicalTensor& tensor = graph->tensors[node.outputs[0]];
    NdSbp& sbp = tensor.sbp;
    const int axes = node.placement.num_axes();
    for (int h = 0; h < axes && h < static_cast<int>(data_parallel.size()); ++h) {
      if (!data_parallel[h] || !sbp[h].is_broadcast()) continue;
      const int64_t extent = node.placement.hierarchy()[h];
      for (int axis = 0; axis < tensor.type.shape.rank(); ++axis) {
        bool split_elsewhere = false;
        for (const Sbp& other : sbp) {
          split_elsewhere = split_elsewhere || (other.is_split() && other.axis == axis);
        }
        if (split_elsewhere || tensor.type.shape.dimension(axis) % extent != 0) continue;
        sbp[h] = Sbp::Split(axis);
        node.gathered_per_use = stage == 3;
        break;
      }
    }
  }
  ComputeOnTheShards(graph);
  // What once-per-step forward ops compute from those variables alone (under mixed precision a
  // weight's bfloat16 copy, cast on the shard) is gathered per use as well, or that copy, read by
  // the forward and the backward, would keep the whole weight for the step.
  if (stage == 3) {
    for (LogicalNode& node : graph->nodes) {
      if (node.kind != LogicalNode::Kind::kOp || !node.once_per_step || node.backward ||
          node.evaluation || node.inputs.empty()) {
        continue;
      }
      bool from_shards = true;
      for (int input : node.inputs) {
        from_shards = from_shards && graph->nodes[graph->tensor(input).producer].gathered_per_use;
      }
      node.gathered_per_use = from_shards;
    }
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
