#include "compiler/autodiff.h"

#include <algorithm>
#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/job_names.h"
#include "compiler/recomputation.h"

namespace loom::compiler {
namespace {

// Emits ops into `job` under unique "grad/" names, on the placement and stage last set.
class JobGradientBuilder final : public GradientBuilder {
 public:
  JobGradientBuilder(job::Job* job, JobNames names) : job_(job), names_(std::move(names)) {}

  void SetPlacement(const std::string& forward_name, const job::Placement* placement,
                    std::optional<int> stage) {
    forward_name_ = forward_name;
    placement_ = placement;
    stage_ = stage;
  }

  std::vector<std::string> Emit(const std::string& op_type, std::vector<std::string> inputs,
                                AttributeMap attributes, int num_outputs = 1) override {
    return EmitNamed(UniqueName(absl::StrCat("grad/", forward_name_, "/", op_type)), op_type,
                     std::move(inputs), std::move(attributes), num_outputs);
  }

  std::vector<std::string> EmitNamed(const std::string& name, const std::string& op_type,
                                     std::vector<std::string> inputs, AttributeMap attributes,
                                     int num_outputs) {
    job::Op* op = job_->add_ops();
    op->set_name(name);
    op->set_type(op_type);
    op->set_backward(true);
    for (std::string& input : inputs) op->add_inputs(std::move(input));
    *op->mutable_attributes() = std::move(attributes);
    if (placement_ != nullptr) *op->mutable_placement() = *placement_;
    if (stage_.has_value()) op->set_stage(*stage_);
    std::vector<std::string> outputs;
    for (int i = 0; i < num_outputs; ++i) {
      std::string output = num_outputs == 1 ? name : UniqueName(absl::StrCat(name, ":", i));
      op->add_outputs(output);
      outputs.push_back(std::move(output));
    }
    return outputs;
  }

  std::string UniqueName(const std::string& base) { return names_.Take(base); }

  // The sum of `gradients` (at least one).
  std::string Sum(const std::vector<std::string>& gradients) {
    std::string sum = gradients[0];
    for (size_t i = 1; i < gradients.size(); ++i) sum = Emit("add", {sum, gradients[i]}, {})[0];
    return sum;
  }

 private:
  job::Job* job_;
  JobNames names_;
  std::string forward_name_;
  const job::Placement* placement_ = nullptr;
  std::optional<int> stage_;
};

// Marks Op.weight_gradient on the backward ops (from `first_backward_op` on) that no gradient of
// an activation depends on: those reached, backwards through the backward ops' inputs, from
// `activation_gradients` are input gradients ("B"); the rest feed only variables' gradients
// ("W"). Zero-bubble schedules defer the W ops.
void MarkWeightGradients(const absl::flat_hash_set<std::string>& activation_gradients,
                         int first_backward_op, job::Job* job) {
  absl::flat_hash_map<std::string, int> producer;
  for (int i = first_backward_op; i < job->ops_size(); ++i) {
    for (const std::string& output : job->ops(i).outputs()) producer[output] = i;
  }
  std::vector<bool> input_gradient(job->ops_size(), false);
  std::vector<int> pending;
  for (const std::string& gradient : activation_gradients) {
    auto found = producer.find(gradient);
    if (found != producer.end() && !input_gradient[found->second]) {
      input_gradient[found->second] = true;
      pending.push_back(found->second);
    }
  }
  while (!pending.empty()) {
    const int op = pending.back();
    pending.pop_back();
    for (const std::string& input : job->ops(op).inputs()) {
      auto found = producer.find(input);
      if (found != producer.end() && !input_gradient[found->second]) {
        input_gradient[found->second] = true;
        pending.push_back(found->second);
      }
    }
  }
  for (int i = first_backward_op; i < job->ops_size(); ++i) {
    if (!input_gradient[i]) job->mutable_ops(i)->set_weight_gradient(true);
  }
}

}  // namespace

absl::StatusOr<job::Job> AddBackward(const job::Job& job, const OpRegistry& registry,
                                     const DeviceSet& devices, const std::string& loss) {
  absl::StatusOr<LogicalGraph> built = BuildLogicalGraph(job, registry, devices);
  if (!built.ok()) return built.status();
  const LogicalGraph& graph = *built;
  absl::StatusOr<Recomputation> recomputation = Recomputation::Create(job, graph);
  if (!recomputation.ok()) return recomputation.status();
  auto found = graph.tensor_by_name.find(loss);
  if (found == graph.tensor_by_name.end()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the loss '", loss, "' is not a tensor of job '", job.name(), "'"));
  }
  const int loss_id = found->second;
  const TensorType& loss_type = graph.tensor(loss_id).type;
  if (loss_type.data_type != plan::FLOAT32 || loss_type.shape.rank() > 1 ||
      loss_type.shape.NumElements() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the loss '", loss, "' must be a scalar, not ", loss_type.ToString()));
  }

  // Tensors that depend on a variable through floating-point (float32, bfloat16) tensors: only
  // they get gradients. And tensors that depend on an input (the data): the gradients of those
  // (activations) are input gradients, the others' (variables and what is computed from them
  // alone, such as a weight's bfloat16 copy) weight gradients.
  std::vector<bool> differentiable(graph.tensors.size(), false);
  std::vector<bool> from_data(graph.tensors.size(), false);
  for (const LogicalNode& node : graph.nodes) {
    bool depends = node.kind == LogicalNode::Kind::kVariable;
    bool reads_data = node.kind == LogicalNode::Kind::kInput;
    if (node.kind == LogicalNode::Kind::kOp) {
      for (int input : node.inputs) {
        depends = depends || differentiable[input];
        reads_data = reads_data || from_data[input];
      }
    }
    for (int output : node.outputs) {
      const plan::DataType data_type = graph.tensor(output).type.data_type;
      differentiable[output] =
          depends && (data_type == plan::FLOAT32 || data_type == plan::BFLOAT16);
      from_data[output] = reads_data;
    }
  }

  job::Job result = job;
  JobNames names(job);
  for (const job::Variable& variable : job.variables()) {
    names.Reserve(absl::StrCat("grad/", variable.name()));
  }
  JobGradientBuilder builder(&result, std::move(names));
  const int first_backward_op = result.ops_size();
  // The gradients of activations (tensors computed from the data): what earlier ops' backward
  // waits for.
  absl::flat_hash_set<std::string> activation_gradients;

  // Gradients of each tensor, summed when the producer is reached.
  std::vector<std::vector<std::string>> gradients(graph.tensors.size());
  const LogicalNode& loss_producer = graph.nodes[graph.tensor(loss_id).producer];
  builder.SetPlacement(loss_producer.name,
                       loss_producer.op != nullptr && loss_producer.op->has_placement()
                           ? &loss_producer.op->placement()
                           : nullptr,
                       loss_producer.stage);
  std::string seed = builder.Emit("ones_like", {loss}, {})[0];
  if (job.num_micro_batches() > 1) {
    // Each micro-batch's loss is the mean over its share of the batch; the step's gradient, the
    // sum over micro-batches, must be that of the mean over the whole batch.
    AttributeMap attributes;
    attributes["scale"].set_float_value(1.0 / job.num_micro_batches());
    seed = builder.Emit("scale", {seed}, std::move(attributes))[0];
  }
  gradients[loss_id].push_back(seed);

  // Each variable's gradient is named (grad/<name>, an identity of the sum of its contributions)
  // right after its first reader's backward, the last to contribute, not after the whole
  // backward: the job's op order is the order the compiler's chains follow on a device
  // (compiler/act_order.h), so a weight's full gradient is then taken over (and reduced) at once
  // rather than kept to the step's end.
  std::vector<std::pair<int, int>> variables_by_first_reader;  // (first reader, variable node)
  {
    std::vector<int> first_reader(graph.nodes.size(), -1);
    for (int k = static_cast<int>(graph.nodes.size()) - 1; k >= 0; --k) {
      for (int input : graph.nodes[k].inputs) {
        const int producer = graph.tensor(input).producer;
        if (graph.nodes[producer].kind == LogicalNode::Kind::kVariable) first_reader[producer] = k;
      }
    }
    for (int k = 0; k < static_cast<int>(graph.nodes.size()); ++k) {
      if (graph.nodes[k].kind == LogicalNode::Kind::kVariable) {
        variables_by_first_reader.emplace_back(first_reader[k], k);
      }
    }
    std::sort(variables_by_first_reader.begin(), variables_by_first_reader.end());
  }
  auto name_variable_gradient = [&](const LogicalNode& variable) {
    builder.SetPlacement(
        variable.name,
        variable.variable->has_placement() ? &variable.variable->placement() : nullptr,
        variable.stage);
    const int output = variable.outputs[0];
    if (gradients[output].empty() || !differentiable[output]) return;
    builder.EmitNamed(absl::StrCat("grad/", variable.name), "identity",
                      {builder.Sum(gradients[output])}, {}, 1);
  };

  for (auto it = graph.nodes.rbegin(); it != graph.nodes.rend(); ++it) {
    const LogicalNode& node = *it;
    const int node_index = static_cast<int>(std::prev(it.base()) - graph.nodes.begin());
    while (!variables_by_first_reader.empty() &&
           variables_by_first_reader.back().first > node_index) {
      name_variable_gradient(graph.nodes[variables_by_first_reader.back().second]);
      variables_by_first_reader.pop_back();
    }
    if (node.kind == LogicalNode::Kind::kVariable) continue;  // named above or below
    const job::Placement* placement = nullptr;
    if (node.op != nullptr && node.op->has_placement()) placement = &node.op->placement();
    if (node.variable != nullptr && node.variable->has_placement()) {
      placement = &node.variable->placement();
    }
    builder.SetPlacement(node.name, placement, node.stage);
    GradientRequest request;
    request.op = &node.context;
    bool any_output_gradient = false;
    for (int output : node.outputs) {
      request.outputs.push_back(graph.tensor(output).name);
      if (gradients[output].empty() || !differentiable[output]) {
        request.output_gradients.emplace_back();
      } else {
        request.output_gradients.push_back(builder.Sum(gradients[output]));
        any_output_gradient = true;
      }
    }
    if (!any_output_gradient || node.kind != LogicalNode::Kind::kOp) continue;
    bool any_input_needed = false;
    for (int input : node.inputs) {
      request.inputs.push_back(graph.tensor(input).name);
      request.needs_input_gradient.push_back(differentiable[input]);
      any_input_needed = any_input_needed || differentiable[input];
    }
    if (!any_input_needed) continue;
    const int first_op_of_node = result.ops_size();
    absl::StatusOr<std::vector<std::string>> input_gradients =
        node.definition->Gradient(request, &builder);
    if (!input_gradients.ok()) {
      return absl::Status(input_gradients.status().code(),
                          absl::StrCat("op '", node.name, "' (", node.op_type,
                                       "): ", input_gradients.status().message()));
    }
    if (input_gradients->size() != node.inputs.size()) {
      return absl::InternalError(absl::StrCat("op '", node.name, "' (", node.op_type,
                                              "): ", input_gradients->size(), " gradients for ",
                                              node.inputs.size(), " inputs"));
    }
    if (recomputation->enabled()) {
      const std::string& trigger =
          *std::find_if(request.output_gradients.begin(), request.output_gradients.end(),
                        [](const std::string& gradient) { return !gradient.empty(); });
      recomputation->RewriteBackward(
          node_index, trigger, *input_gradients, first_op_of_node, &result,
          [&](const std::string& base) { return builder.UniqueName(base); });
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (!(*input_gradients)[i].empty() && differentiable[node.inputs[i]]) {
        gradients[node.inputs[i]].push_back((*input_gradients)[i]);
        if (from_data[node.inputs[i]]) activation_gradients.insert((*input_gradients)[i]);
      }
    }
  }
  // What is left: variables no op reads (first reader -1), which get no gradient.
  while (!variables_by_first_reader.empty()) {
    name_variable_gradient(graph.nodes[variables_by_first_reader.back().second]);
    variables_by_first_reader.pop_back();
  }
  MarkWeightGradients(activation_gradients, first_backward_op, &result);
  return result;
}

}  // namespace loom::compiler
