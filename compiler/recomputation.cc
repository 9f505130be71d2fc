#include "compiler/recomputation.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace loom::compiler {

bool IsCheapToRecompute(const std::string& op_type) {
  static constexpr const char* kCheap[] = {
      "add",     "subtract",  "multiply", "divide", "relu",     "gelu",
      "tanh",    "scale",     "identity", "cast",   "bias_add", "layer_norm",
      "reshape", "transpose", "slice",    "concat", "softmax",  "log_softmax"};
  return std::find(std::begin(kCheap), std::end(kCheap), op_type) != std::end(kCheap);
}

absl::StatusOr<Recomputation> Recomputation::Create(const job::Job& job,
                                                    const LogicalGraph& graph) {
  std::vector<bool> recomputed(graph.nodes.size(), false);
  bool any_block = false;
  bool enabled = false;
  for (size_t i = 0; i < graph.nodes.size(); ++i) {
    const LogicalNode& node = graph.nodes[i];
    if (node.kind != LogicalNode::Kind::kOp || node.op == nullptr) continue;
    const job::Op& op = *node.op;
    if (op.block().empty()) {
      if (op.recompute() != job::OP_RECOMPUTE_DEFAULT) {
        return absl::InvalidArgumentError(absl::StrCat(
            "op '", op.name(), "' sets recompute to ", job::OpRecompute_Name(op.recompute()),
            " but is in no block (Op.block): only the ops of a block are recomputed"));
      }
      continue;
    }
    any_block = true;
    if (node.backward) continue;
    switch (op.recompute()) {
      case job::OP_RECOMPUTE_ALWAYS:
        recomputed[i] = true;
        break;
      case job::OP_RECOMPUTE_NEVER:
        break;
      default:
        recomputed[i] =
            job.recompute() == job::RECOMPUTE_FULL ||
            (job.recompute() == job::RECOMPUTE_SELECTIVE && IsCheapToRecompute(node.op_type));
        break;
    }
    enabled = enabled || recomputed[i];
  }
  if (job.recompute() != job::RECOMPUTE_NONE && !any_block) {
    return absl::InvalidArgumentError(absl::StrCat(
        "recompute is ", job::Recompute_Name(job.recompute()), " but no op of job '", job.name(),
        "' is in a block (Op.block): recomputation works on blocks, such as a transformer's "
        "layers"));
  }
  return Recomputation(graph, std::move(recomputed), enabled);
}

bool Recomputation::Recomputes(int tensor, const std::string& block) const {
  const int producer = graph_->tensor(tensor).producer;
  if (producer < 0 || !recomputed_[producer] || block.empty()) return false;
  const LogicalNode& node = graph_->nodes[producer];
  return node.op != nullptr && node.op->block() == block;
}

std::string Recomputation::Copy(int tensor, const std::vector<std::string>& after,
                                std::vector<job::Op>* emitted,
                                absl::FunctionRef<std::string(const std::string&)> unique_name) {
  if (auto found = copies_.find(tensor); found != copies_.end()) return found->second;
  const LogicalNode& producer = graph_->nodes[graph_->tensor(tensor).producer];
  const std::string& block = producer.op->block();
  std::vector<std::string> inputs;
  bool after_trigger = false;  // some input is a copy, made after the gate
  for (int input : producer.inputs) {
    if (Recomputes(input, block)) {
      std::string copy = Copy(input, after, emitted, unique_name);
      after_trigger = after_trigger || copy != graph_->tensor(input).name;
      inputs.push_back(std::move(copy));
    } else {
      inputs.push_back(graph_->tensor(input).name);
    }
  }
  if (!after_trigger) {
    // The copy's inputs all come from the forward: gate the first that is not a variable.
    int gated = -1;
    for (size_t i = 0; i < producer.inputs.size() && gated < 0; ++i) {
      const int source = graph_->tensor(producer.inputs[i]).producer;
      if (graph_->nodes[source].kind != LogicalNode::Kind::kVariable) gated = static_cast<int>(i);
    }
    if (gated < 0) {
      // Nothing to wait on but variables: the forward's outputs are kept.
      for (int output : producer.outputs) copies_[output] = graph_->tensor(output).name;
      return graph_->tensor(tensor).name;
    }
    std::string& gate_name = gates_[absl::StrJoin({inputs[gated], absl::StrJoin(after, ",")}, "|")];
    if (gate_name.empty()) {
      job::Op gate;
      gate_name = unique_name(absl::StrCat("recompute/", inputs[gated], ".after"));
      gate.set_name(gate_name);
      gate.set_type("identity_after");
      gate.add_inputs(inputs[gated]);
      for (const std::string& name : after) gate.add_inputs(name);
      gate.add_outputs(gate_name);
      gate.set_backward(true);
      if (producer.op->has_placement()) *gate.mutable_placement() = producer.op->placement();
      if (producer.op->has_stage()) gate.set_stage(producer.op->stage());
      emitted->push_back(std::move(gate));
    }
    inputs[gated] = gate_name;
  }
  job::Op clone = *producer.op;
  clone.set_name(unique_name(absl::StrCat("recompute/", producer.name)));
  clone.clear_inputs();
  for (std::string& input : inputs) clone.add_inputs(std::move(input));
  clone.clear_outputs();
  for (int output : producer.outputs) {
    std::string name = unique_name(absl::StrCat("recompute/", graph_->tensor(output).name));
    clone.add_outputs(name);
    copies_[output] = std::move(name);
  }
  clone.set_backward(true);
  clone.clear_block();
  clone.clear_recompute();
  clone.set_recomputes(producer.name);
  emitted->push_back(std::move(clone));
  return copies_.at(tensor);
}

std::string Recomputation::Barrier(const std::string& block, const LogicalNode& forward,
                                   std::vector<job::Op>* emitted,
                                   absl::FunctionRef<std::string(const std::string&)> unique_name) {
  if (auto found = barriers_.find(block); found != barriers_.end()) return found->second;
  std::string& barrier = barriers_[block];
  auto previous = previous_block_.find(block);
  if (previous == previous_block_.end()) return barrier;
  std::vector<Gradient> gradients = leaving_[previous->second];
  if (gradients.empty()) return barrier;
  if (gradients.size() == 1) return barrier = gradients[0].name;
  // A copy of the smallest, waiting on the others.
  std::stable_sort(gradients.begin(), gradients.end(),
                   [](const Gradient& a, const Gradient& b) { return a.elements < b.elements; });
  job::Op op;
  barrier = unique_name(absl::StrCat("recompute/", previous->second, "done"));
  op.set_name(barrier);
  op.set_type("identity_after");
  for (const Gradient& gradient : gradients) op.add_inputs(gradient.name);
  op.add_outputs(barrier);
  op.set_backward(true);
  if (forward.op->has_placement()) *op.mutable_placement() = forward.op->placement();
  if (forward.op->has_stage()) op.set_stage(forward.op->stage());
  emitted->push_back(std::move(op));
  return barrier;
}

void Recomputation::RewriteBackward(
    int node, const std::string& trigger, const std::vector<std::string>& input_gradients,
    int first_op, job::Job* job, absl::FunctionRef<std::string(const std::string&)> unique_name) {
  const LogicalNode& forward = graph_->nodes[node];
  if (!enabled_ || forward.op == nullptr || forward.op->block().empty()) return;
  const std::string& block = forward.op->block();
  if (!first_node_.contains(block)) {
    if (!current_block_.empty()) {
      const LogicalNode& previous = graph_->nodes[first_node_.at(current_block_)];
      if (previous.placement == forward.placement && previous.stage == forward.stage) {
        previous_block_[block] = current_block_;
      }
    }
    first_node_[block] = node;
  }
  current_block_ = block;

  std::vector<job::Op> emitted;
  const int end = job->ops_size();
  for (int i = first_op; i < end; ++i) {
    for (std::string& input : *job->mutable_ops(i)->mutable_inputs()) {
      auto found = graph_->tensor_by_name.find(input);
      if (found == graph_->tensor_by_name.end() || !Recomputes(found->second, block)) continue;
      std::vector<std::string> after = {trigger};
      if (std::string barrier = Barrier(block, forward, &emitted, unique_name); !barrier.empty()) {
        after.push_back(std::move(barrier));
      }
      input = Copy(found->second, after, &emitted, unique_name);
    }
  }
  // The gradients that leave the block (to its inputs from elsewhere and its variables). Their
  // sizes only order the barrier's inputs; BuildLogicalGraph checked every shape's size.
  for (size_t i = 0; i < forward.inputs.size() && i < input_gradients.size(); ++i) {
    if (input_gradients[i].empty()) continue;
    const LogicalNode& source = graph_->nodes[graph_->tensor(forward.inputs[i]).producer];
    if (source.op != nullptr && source.op->block() == block) continue;
    leaving_[block].push_back(
        Gradient{input_gradients[i], graph_->tensor(forward.inputs[i]).type.shape.NumElements()});
  }
  if (emitted.empty()) return;
  for (job::Op& op : emitted) *job->add_ops() = std::move(op);
  // The copies go before the backward ops that read them.
  auto* ops = job->mutable_ops();
  std::rotate(ops->pointer_begin() + first_op, ops->pointer_begin() + end, ops->pointer_end());
}

}  // namespace loom::compiler
