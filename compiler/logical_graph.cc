#include "compiler/logical_graph.h"

#include <algorithm>
#include <deque>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/optimizer_settings.h"
#include "compiler/pipeline_rounds.h"
#include "compiler/token_inputs.h"
#include "core/device_name.h"

namespace loom::compiler {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status Prefixed(const std::string& what, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(what, ": ", status.message()));
}

// Parses a placement and checks its devices exist.
absl::StatusOr<Placement> ResolvePlacement(const job::Placement& proto, const Placement& fallback,
                                           const IndexedDeviceSet& devices,
                                           const std::string& who) {
  if (proto.devices().empty()) {
    if (proto.hierarchy_size() > 0) {
      return Invalid(absl::StrCat(who, ": a placement with a hierarchy needs its devices"));
    }
    return fallback;
  }
  absl::StatusOr<Placement> placement = Placement::FromProto(proto);
  if (!placement.ok()) return Prefixed(who, placement.status());
  for (const plan::Device& device : placement->devices()) {
    if (!devices.Contains(device)) {
      return Invalid(absl::StrCat(who, ": placement names device ", DeviceName(device),
                                  ", which does not exist (the job runs on ",
                                  devices.devices().ToString(), ")"));
    }
  }
  return placement;
}

// Checks an SBP against a tensor's rank and a placement's hierarchy.
absl::StatusOr<NdSbp> ResolveSbp(const std::vector<std::string>& texts, const TensorType& type,
                                 const Placement& placement, const std::string& who,
                                 bool allow_partial) {
  absl::StatusOr<NdSbp> sbp = ParseNdSbp(texts);
  if (!sbp.ok()) return Prefixed(who, sbp.status());
  if (static_cast<int>(sbp->size()) != placement.num_axes()) {
    return Invalid(
        absl::StrCat(who, ": SBP ", NdSbpToString(*sbp), " has ", sbp->size(),
                     " entries but the placement's hierarchy has ", placement.num_axes(), " axes ",
                     absl::StrCat("[", absl::StrJoin(placement.hierarchy(), ", "), "]")));
  }
  absl::flat_hash_map<int, int64_t> parts_per_axis;
  for (size_t h = 0; h < sbp->size(); ++h) {
    const Sbp& axis_sbp = (*sbp)[h];
    if (axis_sbp.is_partial() && !allow_partial) {
      return Invalid(absl::StrCat(who, ": SBP ", NdSbpToString(*sbp),
                                  " is partial, which a variable or input cannot be"));
    }
    if (!axis_sbp.is_split()) continue;
    if (axis_sbp.axis >= type.shape.rank()) {
      return Invalid(absl::StrCat(who, ": ", axis_sbp.ToString(), " is out of range for the ",
                                  type.shape.rank(), "-D tensor ", type.ToString()));
    }
    int64_t& parts = parts_per_axis[axis_sbp.axis];
    parts = (parts == 0 ? 1 : parts) * placement.hierarchy()[h];
    if (type.shape.dimension(axis_sbp.axis) < parts) {
      return Invalid(absl::StrCat(who, ": ", NdSbpToString(*sbp), " splits axis ", axis_sbp.axis,
                                  " of ", type.ToString(), " into ", parts,
                                  " parts, more than its extent"));
    }
  }
  return sbp;
}

plan::DataType OrFloat(plan::DataType type) {
  return type == plan::DATA_TYPE_UNSPECIFIED ? plan::FLOAT32 : type;
}

// A variable's or input's shape: every extent at least 1, within the limits on a tensor's size
// (core/tensor.h), the same check as every op's outputs.
absl::Status CheckShape(const google::protobuf::RepeatedField<int64_t>& shape,
                        plan::DataType data_type, const std::string& who) {
  for (int64_t extent : shape) {
    if (extent < 1) {
      return Invalid(
          absl::StrCat(who, ": shape [", absl::StrJoin(shape, ", "), "] has an extent below 1"));
    }
  }
  absl::StatusOr<int64_t> bytes = CheckedTensorBytes(shape, data_type);
  if (!bytes.ok()) return Prefixed(who, bytes.status());
  return absl::OkStatus();
}

// An op's inferred output: within the limits on a tensor's size, as the job's inputs are (an
// extent of 0, as an empty slice gives, is allowed). `who` names the op.
absl::Status CheckOutputType(const TensorType& type, const std::string& who,
                             const std::string& output) {
  absl::StatusOr<int64_t> bytes = CheckedTensorBytes(type.shape.dimensions(), type.data_type);
  if (!bytes.ok()) {
    return Invalid(absl::StrCat(who, ": output '", output, "' ", bytes.status().message()));
  }
  return absl::OkStatus();
}

// Links a recomputed copy (`node`, typed, not yet placed) to the op it recomputes, which must be
// an op placed before it with the same type, placement, inputs' and outputs' types.
absl::Status LinkRecomputedCopy(const LogicalGraph& graph,
                                const absl::flat_hash_map<std::string, int>& op_index,
                                const std::string& who, LogicalNode& node) {
  const std::string& name = node.op->recomputes();
  auto found = op_index.find(name);
  if (found == op_index.end() || found->second >= static_cast<int>(graph.nodes.size())) {
    return Invalid(absl::StrCat(who, " recomputes '", name, "', which is no op before it"));
  }
  const LogicalNode& original = graph.nodes[found->second];
  if (original.op_type != node.op_type || !(original.placement == node.placement) ||
      original.context.inputs != node.context.inputs ||
      original.context.outputs != node.context.outputs) {
    return Invalid(absl::StrCat(who, " recomputes '", name,
                                "', which differs from it in type, placement or tensor types"));
  }
  node.recomputes = found->second;
  return absl::OkStatus();
}

}  // namespace

IndexedDeviceSet::IndexedDeviceSet(const DeviceSet& devices) : devices_(devices) {
  keys_.reserve(devices.devices.size());
  for (const plan::Device& device : devices.devices) keys_.insert(DeviceKey::Of(device));
}

int64_t DeviceSet::MemoryBudget(size_t position) const {
  return position < memory_budget_bytes.size() ? memory_budget_bytes[position] : 0;
}

int64_t DeviceSet::HostMemoryBudget() const {
  int64_t least = 0;
  for (int64_t budget : host_memory_budget_bytes) {
    if (budget > 0 && (least == 0 || budget < least)) least = budget;
  }
  return least;
}

std::string DeviceSet::ToString() const {
  std::vector<std::string> names;
  for (const plan::Device& device : devices) names.push_back(DeviceName(device));
  return absl::StrJoin(names, ", ");
}

DeviceSet DeviceSet::Cpus(int count, int nodes) {
  DeviceSet set;
  if (nodes < 1) nodes = 1;
  for (int node = 0; node < nodes; ++node) {
    int begin = static_cast<int>(static_cast<int64_t>(count) * node / nodes);
    int end = static_cast<int>(static_cast<int64_t>(count) * (node + 1) / nodes);
    for (int index = 0; index < end - begin; ++index) {
      plan::Device device;
      device.set_node(node);
      device.set_type(plan::CPU);
      device.set_index(index);
      set.devices.push_back(device);
    }
  }
  return set;
}

absl::StatusOr<LogicalGraph> BuildLogicalGraph(const job::Job& job, const OpRegistry& registry,
                                               const DeviceSet& devices) {
  LogicalGraph graph;
  graph.job_name = job.name().empty() ? "job" : job.name();
  graph.num_steps = job.num_steps() > 0 ? job.num_steps() : 1;
  graph.register_slots = job.register_slots() > 0 ? job.register_slots() : 2;
  graph.register_slots_given = job.register_slots() > 0;
  graph.device_memory_budget_bytes = job.device_memory_budget_bytes();
  graph.host_memory_budget_bytes = job.host_memory_budget_bytes();
  graph.gradient_bucket_bytes =
      job.gradient_bucket_bytes() == 0 ? int64_t{25} << 20 : job.gradient_bucket_bytes();
  if (job.register_slots() < 0) return Invalid("register_slots must not be negative");
  if (job.host_memory_budget_bytes() < 0) {
    return Invalid("host_memory_budget_bytes must not be negative");
  }
  if (job.num_micro_batches() < 0) return Invalid("num_micro_batches must not be negative");
  graph.num_micro_batches = std::max(job.num_micro_batches(), 1);
  graph.pipeline_schedule = job.pipeline_schedule();
  graph.evaluation_every_steps = job.evaluation().every_steps();
  if (!job.initial_state().path().empty()) {
    if (job.initial_state().first_step() < 0) {
      return Invalid("initial_state.first_step must not be negative");
    }
    graph.initial_state = &job.initial_state();
    graph.first_step = job.initial_state().first_step();
  } else if (job.initial_state().optimizer_state() || job.initial_state().first_step() != 0) {
    return Invalid("initial_state has no path");
  }

  if (job.variables().empty() && job.inputs().empty() && job.ops().empty()) {
    return Invalid(
        absl::StrCat("job '", graph.job_name, "' has nothing to run: no variables, inputs or ops"));
  }

  // The job's placement: given, or every device as one axis.
  const IndexedDeviceSet known_devices(devices);
  Placement job_placement(devices.devices, {});
  if (job.placement().devices_size() > 0) {
    absl::StatusOr<Placement> placement =
        ResolvePlacement(job.placement(), job_placement, known_devices, "the job's placement");
    if (!placement.ok()) return placement.status();
    job_placement = *placement;
  }
  std::vector<Placement> stage_placements;
  for (int s = 0; s < job.stage_placements_size(); ++s) {
    absl::StatusOr<Placement> placement = ResolvePlacement(
        job.stage_placements(s), job_placement, known_devices, absl::StrCat("stage ", s));
    if (!placement.ok()) return placement.status();
    stage_placements.push_back(*placement);
  }

  // Every node and the tensors it produces; names are unique across tensors and nodes.
  std::vector<LogicalNode> nodes;
  absl::flat_hash_map<std::string, std::string> producer_of_tensor;  // tensor -> who
  absl::flat_hash_map<std::string, int> node_by_name;
  auto declare_tensor = [&](const std::string& tensor, const std::string& who) -> absl::Status {
    if (tensor.empty()) return Invalid(absl::StrCat(who, " has an output with no name"));
    auto [iterator, inserted] = producer_of_tensor.emplace(tensor, who);
    if (!inserted) {
      return Invalid(absl::StrCat("tensor '", tensor, "' is produced by both ", iterator->second,
                                  " and ", who));
    }
    return absl::OkStatus();
  };
  auto declare_node = [&](const std::string& name, const std::string& who) -> absl::Status {
    if (name.empty()) return Invalid(absl::StrCat(who, " has no name"));
    if (!node_by_name.emplace(name, static_cast<int>(node_by_name.size())).second) {
      return Invalid(absl::StrCat("the name '", name, "' is used twice"));
    }
    return absl::OkStatus();
  };

  for (const job::Variable& variable : job.variables()) {
    std::string who = absl::StrCat("variable '", variable.name(), "'");
    if (absl::Status status = declare_node(variable.name(), who); !status.ok()) return status;
    if (absl::Status status = declare_tensor(variable.name(), who); !status.ok()) return status;
    if (absl::Status status = CheckShape(variable.shape(), OrFloat(variable.data_type()), who);
        !status.ok()) {
      return status;
    }
    if (variable.initializer().kind_case() == job::Initializer::KIND_NOT_SET) {
      return Invalid(absl::StrCat(who, " has no initializer"));
    }
    LogicalNode node;
    node.kind = LogicalNode::Kind::kVariable;
    node.name = variable.name();
    node.variable = &variable;
    absl::StatusOr<Placement> placement =
        ResolvePlacement(variable.placement(), job_placement, known_devices, who);
    if (!placement.ok()) return placement.status();
    node.placement = *placement;
    node.context.op_name = variable.name();
    node.context.outputs.push_back(
        TensorType{Shape(variable.shape()), OrFloat(variable.data_type())});
    nodes.push_back(std::move(node));
  }
  for (const job::Input& input : job.inputs()) {
    std::string who = absl::StrCat("input '", input.name(), "'");
    if (absl::Status status = declare_node(input.name(), who); !status.ok()) return status;
    if (absl::Status status = declare_tensor(input.name(), who); !status.ok()) return status;
    if (absl::Status status = CheckShape(input.shape(), OrFloat(input.data_type()), who);
        !status.ok()) {
      return status;
    }
    if (input.source_case() == job::Input::SOURCE_NOT_SET) {
      return Invalid(absl::StrCat(who, " has no source"));
    }
    LogicalNode node;
    node.kind = LogicalNode::Kind::kInput;
    node.name = input.name();
    node.input = &input;
    node.evaluation = input.evaluation();
    absl::StatusOr<Placement> placement =
        ResolvePlacement(input.placement(), job_placement, known_devices, who);
    if (!placement.ok()) return placement.status();
    node.placement = *placement;
    // Token ids are read on the host: on GPUs the batch is read on each GPU's host CPU device,
    // and the boxing to its readers copies it to the GPU.
    if (IsTokenInput(input)) node.placement = node.placement.OnHosts();
    plan::DataType type = OrFloat(input.data_type());
    if (IsTokenInput(input)) {
      if (absl::Status status = CheckTokenInput(input, who); !status.ok()) return status;
    } else if (input.source_case() == job::Input::kRandomIntegersBelow) {
      if (input.data_type() != plan::INT32 && input.data_type() != plan::INT64) {
        return Invalid(absl::StrCat(who, ": random integers need data_type INT32 or INT64"));
      }
      if (input.random_integers_below() < 1) {
        return Invalid(absl::StrCat(who, ": random_integers_below must be at least 1"));
      }
    } else if (type != plan::FLOAT32) {
      return Invalid(absl::StrCat(who, ": random values need data_type FLOAT32"));
    }
    // With micro-batches the graph computes one micro-batch: the batch axis is divided.
    std::vector<int64_t> shape(input.shape().begin(), input.shape().end());
    if (graph.num_micro_batches > 1) {
      if (shape.empty() || shape[0] % graph.num_micro_batches != 0) {
        return Invalid(absl::StrCat(who, ": num_micro_batches ", graph.num_micro_batches,
                                    " does not divide its batch (axis 0 of ",
                                    Shape(input.shape()).ToString(), ")"));
      }
      shape[0] /= graph.num_micro_batches;
    }
    node.context.op_name = input.name();
    node.context.outputs.push_back(TensorType{Shape(shape), type});
    nodes.push_back(std::move(node));
  }
  for (const job::Op& op : job.ops()) {
    std::string who = absl::StrCat("op '", op.name(), "'");
    if (absl::Status status = declare_node(op.name(), who); !status.ok()) return status;
    LogicalNode node;
    node.kind = LogicalNode::Kind::kOp;
    node.name = op.name();
    node.op = &op;
    node.op_type = op.type();
    node.definition = registry.Find(op.type());
    if (node.definition == nullptr) {
      return Invalid(absl::StrCat(who, ": unknown op type '", op.type(),
                                  "' (known: ", absl::StrJoin(registry.OpTypes(), ", "), ")"));
    }
    if (op.outputs().empty()) return Invalid(absl::StrCat(who, " has no outputs"));
    for (const std::string& output : op.outputs()) {
      if (absl::Status status = declare_tensor(output, who); !status.ok()) return status;
    }
    Placement fallback = job_placement;
    if (op.has_stage()) {
      if (op.stage() < 0 || op.stage() >= static_cast<int>(stage_placements.size())) {
        return Invalid(absl::StrCat(who, ": stage ", op.stage(), " has no placement (the job has ",
                                    stage_placements.size(), " stage placements)"));
      }
      node.stage = op.stage();
      fallback = stage_placements[op.stage()];
    }
    node.backward = op.backward();
    if (op.weight_gradient() && !op.backward()) {
      return Invalid(absl::StrCat(who,
                                  ": weight_gradient is set on a forward op (only autodiff's "
                                  "backward ops may be weight gradients)"));
    }
    node.weight_gradient = op.weight_gradient();
    node.once_per_step = op.once_per_step();
    node.evaluation = op.evaluation();
    absl::StatusOr<Placement> placement =
        ResolvePlacement(op.placement(), fallback, known_devices, who);
    if (!placement.ok()) return placement.status();
    node.placement = *placement;
    node.context.op_name = op.name();
    node.context.attributes = &op.attributes();
    nodes.push_back(std::move(node));
  }

  // Wire inputs: every tensor read must be produced.
  absl::flat_hash_map<std::string, int> producer_node;  // tensor -> node position
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].kind != LogicalNode::Kind::kOp) {
      producer_node[nodes[n].name] = static_cast<int>(n);
    } else {
      for (const std::string& output : nodes[n].op->outputs()) {
        producer_node[output] = static_cast<int>(n);
      }
    }
  }
  std::vector<std::vector<int>> successors(nodes.size());
  std::vector<int> in_degree(nodes.size(), 0);
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].kind != LogicalNode::Kind::kOp) continue;
    for (const std::string& input : nodes[n].op->inputs()) {
      auto found = producer_node.find(input);
      if (found == producer_node.end()) {
        return Invalid(absl::StrCat("op '", nodes[n].name, "' reads tensor '", input,
                                    "', which no variable, input or op produces"));
      }
      successors[found->second].push_back(static_cast<int>(n));
      ++in_degree[n];
    }
  }

  // Pipeline stages: every stage up to the last one used has ops, and forward ops feed only the
  // same or later stages.
  std::map<int, std::string> first_op_of_stage;
  for (const LogicalNode& node : nodes) {
    if (node.stage.has_value()) first_op_of_stage.emplace(*node.stage, node.name);
  }
  int expected_stage = 0;
  for (const auto& [stage, op_name] : first_op_of_stage) {
    if (stage != expected_stage) {
      return Invalid(absl::StrCat("op '", op_name, "' is on stage ", stage,
                                  ", but no op is on stage ", expected_stage,
                                  ": stages must be numbered 0, 1, ... without gaps"));
    }
    ++expected_stage;
  }
  graph.num_stages = expected_stage;
  absl::StatusOr<int> virtual_stages =
      StagesPerGroup(graph.pipeline_schedule, stage_placements, graph.num_stages);
  if (!virtual_stages.ok()) return virtual_stages.status();
  graph.virtual_stages = *virtual_stages;
  for (const LogicalNode& node : nodes) {
    if (node.kind != LogicalNode::Kind::kOp || node.backward || !node.stage.has_value()) continue;
    for (const std::string& input : node.op->inputs()) {
      const LogicalNode& producer = nodes[producer_node[input]];
      if (!producer.backward && producer.stage.has_value() && *producer.stage > *node.stage) {
        return Invalid(absl::StrCat("op '", node.name, "' on stage ", *node.stage, " reads '",
                                    input, "' from stage ", *producer.stage,
                                    ": forward ops may only feed the same or a later stage"));
      }
    }
  }

  // Topological order (Kahn, stable: job order among the ready); a leftover is a cycle.
  std::deque<int> ready;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (in_degree[n] == 0) ready.push_back(static_cast<int>(n));
  }
  std::vector<int> order;
  while (!ready.empty()) {
    int n = ready.front();
    ready.pop_front();
    order.push_back(n);
    for (int successor : successors[n]) {
      if (--in_degree[successor] == 0) ready.push_back(successor);
    }
  }
  if (order.size() != nodes.size()) {
    std::vector<std::string> stuck;
    for (size_t n = 0; n < nodes.size() && stuck.size() < 8; ++n) {
      if (in_degree[n] > 0) stuck.push_back(absl::StrCat("'", nodes[n].name, "'"));
    }
    return Invalid(absl::StrCat("ops form a cycle (each waits for another's output): ",
                                absl::StrJoin(stuck, ", ")));
  }

  // Types, in topological order.
  absl::flat_hash_map<std::string, int> op_index;  // ops placed so far, by name
  for (int n : order) {
    LogicalNode node = std::move(nodes[n]);
    int node_index = static_cast<int>(graph.nodes.size());
    if (node.kind == LogicalNode::Kind::kOp) {
      std::string who = absl::StrCat("op '", node.name, "' (", node.op_type, ")");
      op_index[node.name] = node_index;
      for (const std::string& input : node.op->inputs()) {
        int tensor = graph.tensor_by_name.at(input);
        node.inputs.push_back(tensor);
        node.context.inputs.push_back(graph.tensors[tensor].type);
      }
      absl::StatusOr<std::vector<TensorType>> types = node.definition->InferTypes(node.context);
      if (!types.ok()) return Prefixed(who, types.status());
      if (types->size() != static_cast<size_t>(node.op->outputs_size())) {
        return Invalid(absl::StrCat(who, " produces ", types->size(), " outputs but names ",
                                    node.op->outputs_size()));
      }
      for (int i = 0; i < node.op->outputs_size(); ++i) {
        if (absl::Status status = CheckOutputType((*types)[i], who, node.op->outputs(i));
            !status.ok()) {
          return status;
        }
      }
      node.context.outputs = *types;
      if (!node.op->recomputes().empty()) {
        absl::Status status = LinkRecomputedCopy(graph, op_index, who, node);
        if (!status.ok()) return status;
      }
      // Hints: at most one per output, each checked against its tensor and the placement.
      if (node.op->output_sbp_size() > node.op->outputs_size()) {
        return Invalid(absl::StrCat(who, " has ", node.op->output_sbp_size(),
                                    " output SBP hints for ", node.op->outputs_size(), " outputs"));
      }
      node.output_hints.assign(node.op->outputs_size(), std::nullopt);
      for (int i = 0; i < node.op->output_sbp_size(); ++i) {
        const auto& texts = node.op->output_sbp(i).sbp();
        if (texts.empty()) continue;
        absl::StatusOr<NdSbp> hint = ResolveSbp(
            std::vector<std::string>(texts.begin(), texts.end()), (*types)[i], node.placement,
            absl::StrCat(who, ": SBP hint for output '", node.op->outputs(i), "'"),
            /*allow_partial=*/true);
        if (!hint.ok()) return hint.status();
        node.output_hints[i] = *hint;
      }
      for (int i = 0; i < node.op->outputs_size(); ++i) {
        LogicalTensor tensor{node.op->outputs(i), (*types)[i], node_index, i, {}};
        graph.tensor_by_name[tensor.name] = static_cast<int>(graph.tensors.size());
        node.outputs.push_back(static_cast<int>(graph.tensors.size()));
        graph.tensors.push_back(std::move(tensor));
      }
    } else {
      const bool is_variable = node.kind == LogicalNode::Kind::kVariable;
      std::string who = absl::StrCat(is_variable ? "variable '" : "input '", node.name, "'");
      const auto& texts = is_variable ? node.variable->sbp() : node.input->sbp();
      std::vector<std::string> sbp_texts(texts.begin(), texts.end());
      if (sbp_texts.empty()) {
        // Variables default to broadcast, inputs to data parallel (S(0) on every axis).
        sbp_texts.assign(node.placement.num_axes(), is_variable ? "B" : "S(0)");
      }
      const TensorType& type = node.context.outputs[0];
      absl::StatusOr<NdSbp> sbp =
          ResolveSbp(sbp_texts, type, node.placement, who, /*allow_partial=*/false);
      if (!sbp.ok()) return sbp.status();
      LogicalTensor tensor{node.name, type, node_index, 0, *sbp};
      graph.tensor_by_name[tensor.name] = static_cast<int>(graph.tensors.size());
      node.outputs.push_back(static_cast<int>(graph.tensors.size()));
      graph.tensors.push_back(std::move(tensor));
    }
    graph.nodes.push_back(std::move(node));
  }

  // Training: variables with a gradient tensor get updated by the optimizer.
  if (job.optimizer().kind_case() != job::Optimizer::KIND_NOT_SET) {
    graph.optimizer = &job.optimizer();
    absl::StatusOr<LearningRateSchedule> schedule = ScheduleOf(job.optimizer());
    if (!schedule.ok()) return schedule.status();
    graph.learning_rate_schedule = *schedule;
    std::vector<std::string> variable_names;
    std::vector<LogicalNode*> variable_nodes;
    for (LogicalNode& node : graph.nodes) {
      if (node.kind != LogicalNode::Kind::kVariable) continue;
      variable_names.push_back(node.name);
      variable_nodes.push_back(&node);
    }
    absl::StatusOr<std::vector<int>> groups =
        AssignParameterGroups(job.optimizer(), variable_names);
    if (!groups.ok()) return groups.status();
    for (size_t v = 0; v < variable_nodes.size(); ++v) {
      variable_nodes[v]->parameter_group = (*groups)[v];
    }
    for (LogicalNode& node : graph.nodes) {
      if (node.kind != LogicalNode::Kind::kVariable || node.variable->frozen()) continue;
      auto gradient = graph.tensor_by_name.find(absl::StrCat("grad/", node.name));
      if (gradient == graph.tensor_by_name.end()) continue;
      const LogicalTensor& tensor = graph.tensors[gradient->second];
      const TensorType& value = graph.tensors[node.outputs[0]].type;
      if (tensor.type.shape != value.shape || tensor.type.data_type != plan::FLOAT32 ||
          value.data_type != plan::FLOAT32) {
        return Invalid(absl::StrCat("variable '", node.name, "': its gradient '", tensor.name,
                                    "' is ", tensor.type.ToString(), ", not float32",
                                    value.shape.ToString(), " like the variable"));
      }
      node.gradient = gradient->second;
    }
  }

  for (const std::string& name : job.fetch()) {
    auto found = graph.tensor_by_name.find(name);
    if (found == graph.tensor_by_name.end()) {
      return Invalid(absl::StrCat("fetch names tensor '", name, "', which nothing produces"));
    }
    graph.fetches.push_back(found->second);
  }
  for (const std::string& name : job.summed_fetches()) {
    const std::string who = absl::StrCat("summed_fetches names '", name, "'");
    auto found = graph.tensor_by_name.find(name);
    if (found == graph.tensor_by_name.end() || std::find(graph.fetches.begin(), graph.fetches.end(),
                                                         found->second) == graph.fetches.end()) {
      return Invalid(absl::StrCat(who, ", which the job does not fetch"));
    }
    if (name == job.loss()) {
      return Invalid(absl::StrCat(who, ", the loss, whose step value is always the mean"));
    }
    const Shape& shape = graph.tensors[found->second].type.shape;
    if (shape.NumElements() != 1) {
      return Invalid(absl::StrCat(who, ", which is ", shape.ToString(),
                                  ", not one element: only a scalar is summed into a step's "
                                  "report"));
    }
    graph.summed_fetches.push_back(found->second);
  }
  return graph;
}

}  // namespace loom::compiler
