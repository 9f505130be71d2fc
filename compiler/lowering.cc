#include "compiler/lowering.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "compiler/activation_offload.h"
#include "compiler/graph_lowering.h"
#include "compiler/slot_assignment.h"
#include "compiler/source_kernels.h"

namespace loom::compiler {
namespace {

// The tighter of two memory budgets, where 0 means none.
int64_t TighterBudget(int64_t first, int64_t second) {
  if (first <= 0) return second;
  if (second <= 0) return first;
  return std::min(first, second);
}

// The priority of an op's tasks (Task.priority; docs/ARCHITECTURE.md, "Pipelines"). Backward
// first: with credits bounding the stashed activations, 1F1B emerges. A zero-bubble stage runs
// forward first, then input gradients, then weight gradients (ZB-H1 and ZB-H2). Interleaved:
// forwards before backwards, a later stage's first (its round c of v: forward v + c, backward c -
// v; stageless backward ops keep 1, between them). ZB-V: forward 2 + c (a later stage's first),
// input gradients -1 - c, weight gradients -3 - c (an earlier stage's first).
int32_t TaskPriority(const LogicalGraph& graph, const LogicalNode& node) {
  const bool staged = node.stage.has_value() && !node.once_per_step;
  const int round = staged ? RoundOfStage(graph, *node.stage) : 0;
  switch (staged ? graph.pipeline_schedule : job::ONE_F_ONE_B) {
    case job::INTERLEAVED:
      return node.backward ? round - graph.virtual_stages : graph.virtual_stages + round;
    case job::ZERO_BUBBLE_V:
      return !node.backward                      ? 2 + round
             : DefersWeightGradient(graph, node) ? -3 - round
                                                 : -1 - round;
    case job::ZERO_BUBBLE:
    case job::ZERO_BUBBLE_H2:
      return !node.backward ? 0 : DefersWeightGradient(graph, node) ? -2 : -1;
    default:
      return node.backward ? 1 : 0;
  }
}

// The stream an op's task runs on: the compute stream, but for the copies of activation offload
// on a GPU, which run on its copy streams (to host memory on copy-out, back on copy-in) so that
// they overlap its compute. On a CPU device they stay on the compute stream: a memcpy there needs
// a core either way, and one stream lets the memory-sharing proof see both copies
// (docs/ARCHITECTURE.md, "activation offload").
plan::StreamKind StreamOfOp(const std::string& op_type, const plan::Device& device) {
  if (device.type() == plan::CPU) return plan::STREAM_COMPUTE;
  if (op_type == kOffloadOpType) return plan::STREAM_COPY_OUT;
  if (op_type == kReloadOpType) return plan::STREAM_COPY_IN;
  return plan::STREAM_COMPUTE;
}

}  // namespace

absl::StatusOr<plan::Plan> GraphLowering::Run() {
  plan_.set_job_name(graph_.job_name);
  for (size_t position = 0; position < devices_.devices.size(); ++position) {
    plan::DeviceDesc* desc = plan_.add_devices();
    *desc->mutable_device() = devices_.devices[position];
    desc->set_memory_budget_bytes(
        TighterBudget(graph_.device_memory_budget_bytes, devices_.MemoryBudget(position)));
  }
  plan_.set_host_memory_budget_bytes(
      TighterBudget(graph_.host_memory_budget_bytes, devices_.HostMemoryBudget()));
  local_registers_.resize(graph_.tensors.size());
  // Lowering goes in three phases, each in the graph's order (a topological one):
  //  0. the variables and inputs, and the once-per-step forward ops computed from trained
  //     variables alone (a weight's bfloat16 copy): what the step starts from; then the buckets
  //     of what ops read of those whole (BucketGathers);
  //  1. the other ops;
  //  2. the ops that read the variables' gradients (the clipping ops) and what they feed, once
  //     every gradient exists, after the gradients' buckets for them (BucketGradients).
  absl::flat_hash_set<int> gradients;
  absl::flat_hash_set<int> step_start;  // tensors
  for (const LogicalNode& node : graph_.nodes) {
    if (node.kind != LogicalNode::Kind::kVariable) continue;
    for (int tensor : GradientTensorsOf(node)) gradients.insert(tensor);
    if (node.gradient >= 0 && !node.gathered_per_use) step_start.insert(node.outputs[0]);
  }
  std::vector<int> phase(graph_.nodes.size(), 1);
  for (size_t n = 0; n < graph_.nodes.size(); ++n) {
    const LogicalNode& node = graph_.nodes[n];
    // (Not the evaluation branch's: its tasks work only in evaluation steps.)
    bool from_start =
        node.once_per_step && !node.backward && !node.evaluation && !node.inputs.empty();
    for (int tensor : node.inputs) {
      if (gradients.contains(tensor) || phase[graph_.tensors[tensor].producer] == 2) phase[n] = 2;
      from_start = from_start && step_start.contains(tensor);
    }
    if (node.kind != LogicalNode::Kind::kOp) {
      phase[n] = 0;
    } else if (from_start && phase[n] != 2) {
      phase[n] = 0;
      step_start.insert(node.outputs.begin(), node.outputs.end());
    }
  }
  const bool any_late = std::find(phase.begin(), phase.end(), 2) != phase.end();
  for (int current = 0; current <= 2; ++current) {
    if (current == 1) {
      if (absl::Status status = BucketGathers(step_start); !status.ok()) return status;
    }
    if (current == 2 && any_late) {
      if (absl::Status status = BucketGradients(); !status.ok()) return status;
    }
    for (size_t n = 0; n < graph_.nodes.size(); ++n) {
      const LogicalNode& node = graph_.nodes[n];
      if (phase[n] != current) continue;
      absl::Status status = node.kind == LogicalNode::Kind::kOp ? LowerOp(node) : LowerSource(node);
      if (status.ok()) status = CheckTaskCount(absl::StrCat("'", node.name, "'"));
      if (!status.ok()) return status;
    }
  }
  if (absl::Status status = BucketGradients(); !status.ok()) return status;
  for (const LogicalNode& node : graph_.nodes) {
    if (node.kind == LogicalNode::Kind::kVariable && node.gradient >= 0) {
      if (absl::Status status = ConnectGradient(node); !status.ok()) return status;
    }
  }
  if (absl::Status status = CheckTaskCount("the variables' gradient updates"); !status.ok()) {
    return status;
  }
  for (int tensor : graph_.fetches) {
    absl::Status status = LowerFetch(tensor);
    if (status.ok()) {
      status = CheckTaskCount(absl::StrCat("the fetch of '", graph_.tensors[tensor].name, "'"));
    }
    if (!status.ok()) return status;
  }
  AssignRegisterSlots(graph_, op_of_task_, all_to_all_devices_, &plan_);
  AddHostDevices();
  plan_.set_num_micro_batches(graph_.num_micro_batches);
  for (auto& [name, communicator] : communicators_) {
    communicator.set_index(plan_.communicators_size());
    *plan_.add_communicators() = communicator;
  }
  for (int i = 0; i < plan_.tasks_size(); ++i) plan_.mutable_tasks(i)->set_index(i);
  return std::move(plan_);
}

// RESOURCE_EXHAUSTED once the plan has more than max_tasks_ tasks: `what` (an op, variable,
// input or fetch, quoted, or a phrase) added the last ones.
absl::Status GraphLowering::CheckTaskCount(absl::string_view what) const {
  if (max_tasks_ <= 0 || plan_.tasks_size() <= max_tasks_) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      "job '", graph_.job_name, "' lowers to more than ", max_tasks_,
      " tasks, the most this compiler takes (loomd --max-plan-tasks): ", plan_.tasks_size(),
      " after ", what, ". Place it on fewer devices or split it into smaller jobs"));
}

// Devices that tasks use beyond the job's (the hosts of GPUs that read token files: see
// Placement::OnHosts), with the same memory budget.
void GraphLowering::AddHostDevices() {
  absl::flat_hash_set<DeviceKey> known;
  for (const plan::Device& device : devices_.devices) known.insert(DeviceKey::Of(device));
  for (const plan::Task& task : plan_.tasks()) {
    const plan::Device& device = task.stream().device();
    if (!known.insert(DeviceKey::Of(device)).second) continue;
    plan::DeviceDesc* desc = plan_.add_devices();
    *desc->mutable_device() = device;
    desc->set_memory_budget_bytes(graph_.device_memory_budget_bytes);
  }
}

// --- Registers and tasks -------------------------------------------------------------------------

std::string GraphLowering::AddRegister(const std::string& name, const Shape& shape,
                                       plan::DataType type, int num_slots) {
  plan::RegisterDesc* reg = plan_.add_registers();
  reg->set_name(name);
  for (int64_t extent : shape.dimensions()) reg->mutable_tensor()->add_shape(extent);
  reg->mutable_tensor()->set_data_type(type);
  reg->set_num_slots(num_slots > 0 ? num_slots : graph_.register_slots);
  return name;
}

void GraphLowering::MarkEvaluation(const LogicalNode& node, plan::Task* task) const {
  if (!node.evaluation) return;
  task->set_evaluation_every_steps(graph_.evaluation_every_steps);
  task->set_first_step(graph_.first_step);
}

plan::Task* GraphLowering::AddTask(const std::string& name, plan::TaskKind kind,
                                   const plan::Device& device, plan::StreamKind stream,
                                   int stream_index) {
  plan::Task* task = plan_.add_tasks();
  task->set_name(name);
  task->set_kind(kind);
  *task->mutable_stream()->mutable_device() = device;
  task->mutable_stream()->set_kind(stream);
  task->mutable_stream()->set_index(stream_index);
  return task;
}

const Placement& GraphLowering::PlacementOf(int tensor) const {
  return graph_.nodes[graph_.tensors[tensor].producer].placement;
}

// --- Sources -------------------------------------------------------------------------------------

absl::Status GraphLowering::LowerSource(const LogicalNode& node) {
  const bool is_variable = node.kind == LogicalNode::Kind::kVariable;
  const LogicalTensor& tensor = graph_.tensors[node.outputs[0]];
  // An input's source produces a whole step's batch, which an UNPACK task splits into
  // micro-batches: the logical tensor is one micro-batch.
  const int64_t factor = is_variable ? 1 : graph_.num_micro_batches;
  std::vector<int64_t> logical(tensor.type.shape.dimensions().begin(),
                               tensor.type.shape.dimensions().end());
  if (factor > 1) logical[0] *= factor;
  const Shape step_shape(logical);
  plan::VariableLayout* layout = nullptr;
  if (is_variable) {
    layout = plan_.add_variables();
    layout->set_name(node.name);
    for (int64_t extent : logical) layout->mutable_logical()->add_shape(extent);
    layout->mutable_logical()->set_data_type(tensor.type.data_type);
    for (int64_t extent : node.placement.hierarchy()) layout->add_hierarchy(extent);
    for (const Sbp& sbp : tensor.sbp) layout->add_sbp(sbp.ToString());
  }
  std::vector<std::string>& registers = local_registers_[node.outputs[0]];
  for (int rank = 0; rank < node.placement.size(); ++rank) {
    const LocalWindow window = LocalWindowOf(step_shape, node.placement, tensor.sbp, rank);
    const std::string task_name = absl::StrCat(node.name, "@", rank);
    // A variable keeps its value in its task across steps: one slot, initialised once.
    std::string reg = AddRegister(absl::StrCat(tensor.name, factor > 1 ? "~step" : "", "@", rank),
                                  window.shape, tensor.type.data_type, is_variable ? 1 : 0);
    plan::Task* task = AddTask(task_name, is_variable ? plan::VARIABLE : plan::SOURCE,
                               node.placement.device(rank), plan::STREAM_COMPUTE);
    task->set_num_pieces(graph_.num_steps);
    MarkEvaluation(node, task);
    task->add_outputs(reg);
    if (is_variable) {
      variable_tasks_[node.name].push_back(plan_.tasks_size() - 1);
      layout->add_tasks(task_name);
      task->set_initializer_index(
          kernels_.Add(VariableInitializerKernel(graph_, node, tensor.name, logical, window)));
    } else {
      absl::StatusOr<plan::KernelConf> kernel = InputKernel(graph_, *node.input, logical, window);
      if (!kernel.ok()) return kernel.status();
      task->set_kernel_index(kernels_.Add(std::move(*kernel)));
    }
    if (factor > 1) {
      const LocalWindow micro = LocalWindowOf(tensor.type.shape, node.placement, tensor.sbp, rank);
      if (window.shape.dimension(0) != factor * micro.shape.dimension(0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", node.name, "': rank ", rank, " reads ", window.shape.dimension(0),
            " samples per step, which num_micro_batches ", factor,
            " does not divide into its micro-batches of ", micro.shape.dimension(0)));
      }
      std::string micro_register =
          AddRegister(absl::StrCat(tensor.name, "@", rank), micro.shape, tensor.type.data_type);
      plan::Task* unpack = AddTask(absl::StrCat("unpack:", task_name), plan::UNPACK,
                                   node.placement.device(rank), plan::STREAM_COMPUTE);
      unpack->set_factor(static_cast<int32_t>(factor));
      unpack->add_inputs(reg);
      unpack->add_outputs(micro_register);
      reg = micro_register;
    }
    registers.push_back(reg);
  }
  return absl::OkStatus();
}

// --- Training ------------------------------------------------------------------------------------

// Feeds a variable's gradient, boxed to the variable's own placement and SBP, into each rank's
// VARIABLE task, with the job's optimizer as its kernel. For a replicated variable of a
// data-parallel job the gradient is partial: that boxing is the gradient all-reduce.
absl::Status GraphLowering::ConnectGradient(const LogicalNode& node) {
  const LogicalTensor& value = graph_.tensors[node.outputs[0]];
  absl::StatusOr<std::vector<std::string>> gradient =
      Materialize(node.gradient, node.placement, value.sbp, /*per_step=*/true);
  if (!gradient.ok()) {
    return absl::Status(
        gradient.status().code(),
        absl::StrCat("variable '", node.name, "': its gradient: ", gradient.status().message()));
  }
  std::vector<std::string> state_names;
  plan::KernelConf optimizer = OptimizerKernel(graph_, node, &state_names);
  plan::VariableLayout* layout = nullptr;
  for (plan::VariableLayout& candidate : *plan_.mutable_variables()) {
    if (candidate.name() == node.name) layout = &candidate;
  }
  for (const std::string& state : state_names) layout->add_state_names(state);
  const std::vector<int64_t> logical(value.type.shape.dimensions().begin(),
                                     value.type.shape.dimensions().end());
  const std::vector<int>& tasks = variable_tasks_[node.name];
  const int optimizer_index = kernels_.Add(std::move(optimizer));
  for (size_t rank = 0; rank < tasks.size(); ++rank) {
    plan::Task* task = plan_.mutable_tasks(tasks[rank]);
    task->add_inputs((*gradient)[rank]);
    task->set_kernel_index(optimizer_index);
    task->set_num_optimizer_states(static_cast<int32_t>(state_names.size()));
    if (graph_.initial_state != nullptr && graph_.initial_state->optimizer_state()) {
      const LocalWindow window =
          LocalWindowOf(value.type.shape, node.placement, value.sbp, static_cast<int>(rank));
      for (const std::string& state : state_names) {
        task->add_state_initializer_indices(
            kernels_.Add(CheckpointSliceKernel(graph_, state, logical, window)));
      }
    }
  }
  return absl::OkStatus();
}

// --- Ops -----------------------------------------------------------------------------------------

absl::Status GraphLowering::LowerOp(const LogicalNode& node) {
  std::vector<std::vector<std::string>> inputs;
  const int node_index = static_cast<int>(&node - graph_.nodes.data());
  for (size_t i = 0; i < node.inputs.size(); ++i) {
    const bool per_use = graph_.nodes[graph_.tensors[node.inputs[i]].producer].gathered_per_use;
    absl::StatusOr<std::vector<std::string>> registers =
        Materialize(node.inputs[i], node.placement, node.input_sbp[i], node.once_per_step,
                    per_use ? node_index : -1);
    if (!registers.ok()) {
      return absl::Status(
          registers.status().code(),
          absl::StrCat("op '", node.name, "': input '", graph_.tensors[node.inputs[i]].name,
                       "': ", registers.status().message()));
    }
    inputs.push_back(std::move(*registers));
  }
  for (int output : node.outputs) local_registers_[output].clear();
  const int32_t priority = TaskPriority(graph_, node);
  const bool to_host_memory = node.op_type == kOffloadOpType;
  for (int rank = 0; rank < node.placement.size(); ++rank) {
    LoweringContext context;
    context.op = &node.context;
    context.input_sbp = node.input_sbp;
    context.coordinates = node.placement.Coordinates(rank);
    context.hierarchy = node.placement.hierarchy();
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const TensorType& type = node.context.inputs[i];
      context.local_inputs.push_back(
          TensorType{LocalWindowOf(type.shape, node.placement, node.input_sbp[i], rank).shape,
                     type.data_type});
    }
    plan::Task* task =
        AddTask(absl::StrCat(node.name, "@", rank), plan::COMPUTE, node.placement.device(rank),
                StreamOfOp(node.op_type, node.placement.device(rank)));
    task->set_priority(priority);
    MarkEvaluation(node, task);
    op_of_task_[task->name()] = &node;
    for (size_t i = 0; i < node.inputs.size(); ++i) task->add_inputs(inputs[i][rank]);
    for (int output : node.outputs) {
      const LogicalTensor& tensor = graph_.tensors[output];
      context.output_sbp.push_back(tensor.sbp);
      Shape local = LocalWindowOf(tensor.type.shape, node.placement, tensor.sbp, rank).shape;
      context.local_outputs.push_back(TensorType{local, tensor.type.data_type});
      std::string reg =
          AddRegister(absl::StrCat(tensor.name, "@", rank), local, tensor.type.data_type);
      if (to_host_memory) plan_.mutable_registers()->rbegin()->set_host_memory(true);
      task->add_outputs(reg);
      local_registers_[output].push_back(reg);
    }
    absl::StatusOr<plan::KernelConf> kernel = node.definition->Lower(node.op_type, context);
    if (!kernel.ok()) {
      return absl::Status(
          kernel.status().code(),
          absl::StrCat("op '", node.name, "' (", node.op_type, "): ", kernel.status().message()));
    }
    task->set_kernel_index(kernels_.Add(std::move(*kernel)));
  }
  return absl::OkStatus();
}

// Every fetched tensor has one piece per micro-batch (a per-step tensor is repeated).
absl::Status GraphLowering::LowerFetch(int tensor_id) {
  const LogicalTensor& tensor = graph_.tensors[tensor_id];
  const Placement& placement = PlacementOf(tensor_id);
  absl::StatusOr<std::vector<std::string>> registers =
      Materialize(tensor_id, placement, tensor.sbp, /*per_step=*/false);
  if (!registers.ok()) return registers.status();
  plan::Fetch* fetch = plan_.add_fetches();
  fetch->set_tensor(tensor.name);
  for (int64_t extent : tensor.type.shape.dimensions()) fetch->mutable_logical()->add_shape(extent);
  fetch->mutable_logical()->set_data_type(tensor.type.data_type);
  for (int64_t extent : placement.hierarchy()) fetch->add_hierarchy(extent);
  for (const Sbp& sbp : tensor.sbp) fetch->add_sbp(sbp.ToString());
  fetch->set_summed_over_step(std::find(graph_.summed_fetches.begin(), graph_.summed_fetches.end(),
                                        tensor_id) != graph_.summed_fetches.end());
  fetch->set_evaluation(graph_.nodes[tensor.producer].evaluation);
  for (int rank = 0; rank < placement.size(); ++rank) {
    std::string name = absl::StrCat("fetch:", tensor.name, "@", rank);
    plan::Task* task = AddTask(name, plan::SINK, placement.device(rank), plan::STREAM_COMPUTE);
    task->add_inputs((*registers)[rank]);
    fetch->add_sinks(name);
  }
  return absl::OkStatus();
}

absl::StatusOr<plan::Plan> LowerToPlan(const LogicalGraph& graph, const DeviceSet& devices,
                                       int64_t max_tasks) {
  return GraphLowering(graph, devices, max_tasks).Run();
}

}  // namespace loom::compiler
