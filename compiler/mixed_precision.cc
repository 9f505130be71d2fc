#include "compiler/mixed_precision.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "compiler/job_names.h"
#include "core/data_type.h"

namespace loom::compiler {
namespace {

constexpr char kBfloat16[] = "bfloat16";
constexpr char kFloat32[] = "float32";

// A cast of `input` to `to`, named `name` (its output too), placed, staged and in the block
// (recomputation) like `like`.
job::Op CastLike(const job::Op& like, const std::string& name, const std::string& input,
                 const std::string& output, const char* to) {
  job::Op cast;
  cast.set_name(name);
  cast.set_type("cast");
  cast.add_inputs(input);
  cast.add_outputs(output);
  (*cast.mutable_attributes())["to"].set_string_value(to);
  if (like.has_placement()) *cast.mutable_placement() = like.placement();
  if (like.has_stage()) cast.set_stage(like.stage());
  cast.set_backward(like.backward());
  cast.set_once_per_step(like.once_per_step());
  cast.set_evaluation(like.evaluation());
  cast.set_block(like.block());
  return cast;
}

// The ops run on bfloat16 copies of their inputs, with the labels of those copies; none for
// other ops.
absl::Span<const char* const> CastInputLabels(const std::string& op_type) {
  static constexpr const char* kMatmul[] = {"a", "b"};
  static constexpr const char* kAttention[] = {"q", "k", "v"};
  if (op_type == "matmul") return kMatmul;
  if (op_type == "causal_attention") return kAttention;
  return {};
}

}  // namespace

absl::StatusOr<job::Job> AddMixedPrecisionCasts(const job::Job& job, const OpRegistry& registry,
                                                const DeviceSet& devices) {
  const plan::DataType target = job.matmul_data_type();
  if (target == plan::DATA_TYPE_UNSPECIFIED || target == plan::FLOAT32) return job;
  if (target != plan::BFLOAT16) {
    return absl::InvalidArgumentError(
        absl::StrCat("matmul_data_type must be float32 or bfloat16, not ", DataTypeName(target)));
  }
  absl::StatusOr<LogicalGraph> graph = BuildLogicalGraph(job, registry, devices);
  if (!graph.ok()) return graph.status();
  const auto is_float32 = [&](const std::string& tensor) {
    auto found = graph->tensor_by_name.find(tensor);
    return found != graph->tensor_by_name.end() &&
           graph->tensor(found->second).type.data_type == plan::FLOAT32;
  };

  const auto is_per_step = [&](const std::string& tensor) {
    auto found = graph->tensor_by_name.find(tensor);
    return found != graph->tensor_by_name.end() && graph->PerStep(found->second);
  };

  JobNames names(job);
  job::Job result = job;
  result.clear_ops();
  for (const job::Op& op : job.ops()) {
    const absl::Span<const char* const> labels = CastInputLabels(op.type());
    bool cast = !labels.empty() && !op.keep_float32() &&
                op.inputs_size() == static_cast<int>(labels.size()) && op.outputs_size() == 1;
    for (int index = 0; cast && index < op.inputs_size(); ++index) {
      cast = is_float32(op.inputs(index));
    }
    if (!cast) {
      *result.add_ops() = op;
      continue;
    }
    job::Op narrow = op;
    for (int index = 0; index < op.inputs_size(); ++index) {
      const std::string name =
          names.Take(absl::StrCat(op.name(), ".", labels[index], ".", kBfloat16));
      job::Op cast = CastLike(op, name, op.inputs(index), name, kBfloat16);
      // A variable's copy is made once a step and read by every micro-batch (REPEAT), not cast
      // (and, under ZeRO, gathered) once per micro-batch; its gradient, per micro-batch, is cast
      // back per micro-batch and summed in float32 as before.
      if (is_per_step(op.inputs(index))) cast.set_once_per_step(true);
      *result.add_ops() = std::move(cast);
      narrow.set_inputs(index, name);
    }
    const std::string product = names.Take(absl::StrCat(op.outputs(0), ".", kBfloat16));
    narrow.set_outputs(0, product);
    narrow.clear_output_sbp();
    *result.add_ops() = std::move(narrow);
    job::Op back = CastLike(op, names.Take(absl::StrCat(op.name(), ".", kFloat32)), product,
                            op.outputs(0), kFloat32);
    *back.mutable_output_sbp() = op.output_sbp();
    *result.add_ops() = std::move(back);
  }
  return result;
}

}  // namespace loom::compiler
