#include "compiler/lowering.h"

#include <algorithm>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/boxing.h"
#include "runtime/device_key.h"
#include "runtime/device_name.h"
#include "runtime/shared_kernels.h"

namespace loom::compiler {
namespace {

// A device in the text that orders communicators by their members.
std::string DeviceSortKey(const plan::Device& device) {
  return absl::StrCat(device.node(), "/", static_cast<int>(device.type()), ":", device.index());
}

// The tighter of two memory budgets, where 0 means none.
int64_t TighterBudget(int64_t first, int64_t second) {
  if (first <= 0) return second;
  if (second <= 0) return first;
  return std::min(first, second);
}

plan::KernelConf KernelOfType(const std::string& op_type) {
  plan::KernelConf kernel;
  kernel.set_op_type(op_type);
  return kernel;
}

void SetInt(plan::KernelConf* conf, const std::string& name, int64_t value) {
  (*conf->mutable_attributes())[name].set_int_value(value);
}
void SetFloat(plan::KernelConf* conf, const std::string& name, double value) {
  (*conf->mutable_attributes())[name].set_float_value(value);
}
void SetIntList(plan::KernelConf* conf, const std::string& name,
                const std::vector<int64_t>& values) {
  auto* list = (*conf->mutable_attributes())[name].mutable_int_list();
  for (int64_t value : values) list->add_values(value);
}

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

class Lowering {
 public:
  Lowering(const LogicalGraph& graph, const DeviceSet& devices, int64_t max_tasks)
      : graph_(graph), devices_(devices), max_tasks_(max_tasks) {}

  absl::StatusOr<plan::Plan> Run() {
    plan_.set_job_name(graph_.job_name);
    for (size_t position = 0; position < devices_.devices.size(); ++position) {
      plan::DeviceDesc* desc = plan_.add_devices();
      *desc->mutable_device() = devices_.devices[position];
      desc->set_memory_budget_bytes(
          TighterBudget(graph_.device_memory_budget_bytes, devices_.MemoryBudget(position)));
    }
    local_registers_.resize(graph_.tensors.size());
    for (const LogicalNode& node : graph_.nodes) {
      absl::Status status;
      switch (node.kind) {
        case LogicalNode::Kind::kVariable:
        case LogicalNode::Kind::kInput:
          status = LowerSource(node);
          break;
        case LogicalNode::Kind::kOp:
          status = LowerOp(node);
          break;
      }
      if (status.ok()) status = CheckTaskCount(absl::StrCat("'", node.name, "'"));
      if (!status.ok()) return status;
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
    const Producers producers = ProducersOf();
    if (!graph_.register_slots_given) SetSameStreamSlots(producers);
    SetStashSlots(producers);
    AddHostDevices();
    plan_.set_num_micro_batches(graph_.num_micro_batches);
    for (auto& [name, communicator] : communicators_) {
      communicator.set_index(plan_.communicators_size());
      *plan_.add_communicators() = communicator;
    }
    for (int i = 0; i < plan_.tasks_size(); ++i) plan_.mutable_tasks(i)->set_index(i);
    return std::move(plan_);
  }

 private:
  // RESOURCE_EXHAUSTED once the plan has more than max_tasks_ tasks: `what` (an op, variable,
  // input or fetch, quoted, or a phrase) added the last ones.
  absl::Status CheckTaskCount(absl::string_view what) const {
    if (max_tasks_ <= 0 || plan_.tasks_size() <= max_tasks_) return absl::OkStatus();
    return absl::ResourceExhaustedError(absl::StrCat(
        "job '", graph_.job_name, "' lowers to more than ", max_tasks_,
        " tasks, the most this compiler takes (loomd --max-plan-tasks): ", plan_.tasks_size(),
        " after ", what, ". Place it on fewer devices or split it into smaller jobs"));
  }

  // Devices that tasks use beyond the job's (the hosts of GPUs that read token files: see
  // Placement::OnHosts), with the same memory budget.
  void AddHostDevices() {
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

  // --- Registers and tasks -------------------------------------------------------------------

  std::string AddRegister(const std::string& name, const Shape& shape, plan::DataType type,
                          int num_slots = 0) {
    plan::RegisterDesc* reg = plan_.add_registers();
    reg->set_name(name);
    for (int64_t extent : shape.dimensions()) reg->mutable_tensor()->add_shape(extent);
    reg->mutable_tensor()->set_data_type(type);
    reg->set_num_slots(num_slots > 0 ? num_slots : graph_.register_slots);
    return name;
  }

  plan::Task* AddTask(const std::string& name, plan::TaskKind kind, const plan::Device& device,
                      plan::StreamKind stream, int stream_index = 0) {
    plan::Task* task = plan_.add_tasks();
    task->set_name(name);
    task->set_kind(kind);
    *task->mutable_stream()->mutable_device() = device;
    task->mutable_stream()->set_kind(stream);
    task->mutable_stream()->set_index(stream_index);
    return task;
  }

  const Placement& PlacementOf(int tensor) const {
    return graph_.nodes[graph_.tensors[tensor].producer].placement;
  }

  // --- Sources --------------------------------------------------------------------------------

  absl::Status LowerSource(const LogicalNode& node) {
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
      task->add_outputs(reg);
      if (is_variable) {
        variable_tasks_[node.name].push_back(plan_.tasks_size() - 1);
        layout->add_tasks(task_name);
        task->set_initializer_index(
            kernels_.Add(VariableInitializer(node, tensor.name, logical, window)));
      } else {
        absl::StatusOr<plan::KernelConf> kernel = InputKernel(*node.input, logical, window);
        if (!kernel.ok()) return kernel.status();
        task->set_kernel_index(kernels_.Add(std::move(*kernel)));
      }
      if (factor > 1) {
        const LocalWindow micro =
            LocalWindowOf(tensor.type.shape, node.placement, tensor.sbp, rank);
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

  // The kernel writing a variable's initial value on one rank: from the job's initial state when
  // it has one, else from the variable's initializer.
  plan::KernelConf VariableInitializer(const LogicalNode& node, const std::string& checkpoint_name,
                                       const std::vector<int64_t>& logical,
                                       const LocalWindow& window) const {
    plan::KernelConf conf;
    if (graph_.initial_state != nullptr) {
      return CheckpointSlice(checkpoint_name, logical, window);
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

  // Reads this rank's window of the tensor `name` of the job's initial-state checkpoint.
  plan::KernelConf CheckpointSlice(const std::string& name, const std::vector<int64_t>& logical,
                                   const LocalWindow& window) const {
    plan::KernelConf conf;
    conf.set_op_type("safetensors_slice");
    (*conf.mutable_attributes())["path"].set_string_value(graph_.initial_state->path());
    (*conf.mutable_attributes())["tensor"].set_string_value(name);
    SetIntList(&conf, "logical_shape", logical);
    SetIntList(&conf, "slice_begin", window.begin);
    return conf;
  }

  int64_t FirstStep() const {
    return graph_.initial_state != nullptr ? graph_.initial_state->first_step() : 0;
  }

  // The source kernel of an input on one rank: the whole step's batch of that rank.
  absl::StatusOr<plan::KernelConf> InputKernel(const job::Input& input,
                                               const std::vector<int64_t>& logical,
                                               const LocalWindow& window) const {
    plan::KernelConf conf;
    if (FirstStep() > 0) SetInt(&conf, "first_step", FirstStep());
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
      case job::Input::kTokenFile: {
        // Rows are samples: this rank's window must cover whole sequences.
        if (window.begin[1] != 0 || window.shape.dimension(1) != logical[1]) {
          return absl::InvalidArgumentError(
              absl::StrCat("input '", input.name(),
                           "': a token-file input may be split only on its batch axis"));
        }
        conf.set_op_type("token_batch");
        const job::TokenFile& file = input.token_file();
        (*conf.mutable_attributes())["path"].set_string_value(file.path());
        (*conf.mutable_attributes())["format"].set_string_value(
            file.format().empty() ? "bytes" : file.format());
        (*conf.mutable_attributes())["targets"].set_bool_value(file.targets());
        SetInt(&conf, "global_batch", logical[0]);
        SetInt(&conf, "sequence", logical[1]);
        SetInt(&conf, "sample_begin", window.begin[0]);
        SetInt(&conf, "sample_count", window.shape.dimension(0));
        return conf;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' has no source"));
    }
    SetIntList(&conf, "logical_shape", logical);
    SetIntList(&conf, "slice_begin", window.begin);
    return conf;
  }

  // --- Training ---------------------------------------------------------------------------------

  // Feeds a variable's gradient, boxed to the variable's own placement and SBP, into each rank's
  // VARIABLE task, with the job's optimizer as its kernel. For a replicated variable of a
  // data-parallel job the gradient is partial: that boxing is the gradient all-reduce.
  // Data parallelism: the gradients of variables that need only all-reduces (P on some hierarchy
  // axes, to B there; any other axis unchanged, e.g. S(1) of a tensor-parallel weight) are packed
  // per device into flat buckets of at most graph_.gradient_bucket_bytes per device, in reverse
  // variable order (about the order the backward pass produces them), each all-reduced by one
  // collective and unpacked. Along the reduced axes the bucket is one tensor; along the others
  // its ranks hold different gradients, which no collective of the bucket mixes. The unpacked
  // registers are what Materialize then returns for those gradients, so ConnectGradient does not
  // change. As DDP does: one collective per bucket instead of one per variable.
  absl::Status BucketGradients() {
    if (graph_.gradient_bucket_bytes <= 0) return absl::OkStatus();
    struct Member {
      int tensor = -1;
      int64_t local_elements = 0;          // on every rank
      std::vector<Shape> local_shapes;     // per rank, as the variable holds it
      std::vector<std::string> registers;  // per rank: the gradient (summed over micro-batches)
      std::string cache_key;               // Materialize's key for it as the variable's SBP
    };
    struct Group {
      const Placement* placement = nullptr;
      NdSbp from;
      NdSbp to;
      std::vector<Member> members;
    };
    std::map<std::string, Group> groups;
    std::vector<std::string> group_order;
    for (auto node = graph_.nodes.rbegin(); node != graph_.nodes.rend(); ++node) {
      if (node->kind != LogicalNode::Kind::kVariable || node->gradient < 0) continue;
      const LogicalTensor& gradient = graph_.tensors[node->gradient];
      const LogicalTensor& value = graph_.tensors[node->outputs[0]];
      if (gradient.type.data_type != plan::FLOAT32) continue;
      if (!(PlacementOf(node->gradient) == node->placement)) continue;
      const NdSbp from = Canonical(node->placement, gradient.sbp);
      const NdSbp to = Canonical(node->placement, value.sbp);
      // The bucket's SBP: the reduced axes as they are, B on the others.
      NdSbp bucket_from(from.size(), Sbp::Broadcast());
      bool reduces = false;
      bool only_reduces = true;
      for (size_t axis = 0; axis < from.size(); ++axis) {
        if (from[axis].kind == Sbp::Kind::kPartialSum && to[axis].is_broadcast()) {
          reduces = true;
          bucket_from[axis] = from[axis];
        } else if (from[axis] != to[axis] || from[axis].is_partial()) {
          only_reduces = false;
        }
      }
      if (!reduces || !only_reduces) continue;
      // Every rank's part of the flat buffer must be the same size.
      std::vector<Shape> local_shapes;
      bool balanced = true;
      for (int rank = 0; rank < node->placement.size(); ++rank) {
        local_shapes.push_back(LocalWindowOf(gradient.type.shape, node->placement, to, rank).shape);
        balanced = balanced && local_shapes[rank].NumElements() == local_shapes[0].NumElements();
      }
      if (!balanced) continue;
      const bool accumulated = graph_.num_micro_batches > 1 && !PerStep(node->gradient);
      Member member;
      member.tensor = node->gradient;
      member.local_elements = local_shapes[0].NumElements();
      member.local_shapes = std::move(local_shapes);
      member.cache_key = absl::StrCat(node->gradient, "|", node->placement.ToString(), "|",
                                      NdSbpToString(to), accumulated ? "|sum" : "");
      // Already boxed for another reader (gradient clipping): that collective serves.
      if (materialized_.contains(member.cache_key)) continue;
      if (accumulated) {
        absl::StatusOr<std::vector<std::string>> sums = Accumulated(node->gradient);
        if (!sums.ok()) return sums.status();
        member.registers = *sums;
      } else {
        member.registers = local_registers_[node->gradient];
      }
      const std::string group_key =
          absl::StrCat(node->placement.ToString(), "|", NdSbpToString(bucket_from));
      auto [group, inserted] = groups.try_emplace(group_key);
      if (inserted) {
        group->second.placement = &node->placement;
        group->second.from = bucket_from;
        group->second.to = NdSbp(from.size(), Sbp::Broadcast());
        group_order.push_back(group_key);
      }
      group->second.members.push_back(std::move(member));
    }
    for (const std::string& key : group_order) {
      Group& group = groups[key];
      std::vector<Member> bucket;
      int64_t bucket_bytes = 0;
      for (size_t i = 0; i <= group.members.size(); ++i) {
        const int64_t bytes = i < group.members.size() ? group.members[i].local_elements * 4 : 0;
        const bool full = !bucket.empty() && bucket_bytes + bytes > graph_.gradient_bucket_bytes;
        if (i == group.members.size() || full) {
          if (absl::Status status = AllReduceBucket(group.placement, group.from, group.to, bucket);
              !status.ok()) {
            return status;
          }
          bucket.clear();
          bucket_bytes = 0;
        }
        if (i < group.members.size()) {
          bucket.push_back(std::move(group.members[i]));
          bucket_bytes += bytes;
        }
      }
    }
    return absl::OkStatus();
  }

  // One bucket of BucketGradients: pack, all-reduce, unpack. A bucket of one gradient is left to
  // the ordinary boxing.
  template <typename MemberList>
  absl::Status AllReduceBucket(const Placement* placement, const NdSbp& from, const NdSbp& to,
                               const MemberList& members) {
    if (members.size() < 2) return absl::OkStatus();
    int64_t elements = 0;
    for (const auto& member : members) elements += member.local_elements;
    LogicalTensor bucket;
    bucket.name = absl::StrCat("gradient_bucket.", buckets_++);
    bucket.type.shape = Shape({elements});
    bucket.type.data_type = plan::FLOAT32;
    bucket.sbp = from;
    std::vector<std::string> registers;
    for (int rank = 0; rank < placement->size(); ++rank) {
      std::string reg =
          AddRegister(absl::StrCat(bucket.name, "@", rank), bucket.type.shape, plan::FLOAT32);
      plan::Task* task = AddTask(absl::StrCat("pack:", bucket.name, "@", rank), plan::COMPUTE,
                                 placement->device(rank), plan::STREAM_COMPUTE);
      task->set_kernel_index(kernels_.Add(KernelOfType("pack_flat")));
      for (const auto& member : members) task->add_inputs(member.registers[rank]);
      task->add_outputs(reg);
      registers.push_back(std::move(reg));
    }
    absl::StatusOr<BoxingPlan> boxing = PlanBoxing(bucket.type, *placement, from, *placement, to);
    if (!boxing.ok()) return boxing.status();
    for (const BoxingStep& step : boxing->source_steps) {
      registers = ApplyStep(bucket, *placement, step, registers, /*per_step=*/true);
    }
    std::vector<std::vector<std::string>> unpacked(members.size());
    for (int rank = 0; rank < placement->size(); ++rank) {
      plan::Task* task = AddTask(absl::StrCat("unpack:", bucket.name, "@", rank), plan::COMPUTE,
                                 placement->device(rank), plan::STREAM_COMPUTE);
      task->set_kernel_index(kernels_.Add(KernelOfType("unpack_flat")));
      task->add_inputs(registers[rank]);
      for (size_t i = 0; i < members.size(); ++i) {
        const LogicalTensor& gradient = graph_.tensors[members[i].tensor];
        std::string reg = AddRegister(absl::StrCat(gradient.name, "~", bucket.name, "@", rank),
                                      members[i].local_shapes[rank], plan::FLOAT32);
        task->add_outputs(reg);
        unpacked[i].push_back(std::move(reg));
      }
    }
    for (size_t i = 0; i < members.size(); ++i) {
      materialized_[members[i].cache_key] = std::move(unpacked[i]);
    }
    return absl::OkStatus();
  }

  absl::Status ConnectGradient(const LogicalNode& node) {
    const LogicalTensor& value = graph_.tensors[node.outputs[0]];
    absl::StatusOr<std::vector<std::string>> gradient =
        Materialize(node.gradient, node.placement, value.sbp, /*per_step=*/true);
    if (!gradient.ok()) {
      return absl::Status(
          gradient.status().code(),
          absl::StrCat("variable '", node.name, "': its gradient: ", gradient.status().message()));
    }
    plan::KernelConf optimizer;
    if (FirstStep() > 0) SetInt(&optimizer, "first_step", FirstStep());
    std::vector<std::string> state_names;
    const job::Optimizer& settings = *graph_.optimizer;
    if (settings.has_sgd()) {
      const job::SgdOptimizer& sgd = settings.sgd();
      optimizer.set_op_type("sgd");
      SetFloat(&optimizer, "lr", sgd.learning_rate());
      SetFloat(&optimizer, "momentum", sgd.momentum());
      SetFloat(&optimizer, "dampening", sgd.dampening());
      SetFloat(&optimizer, "weight_decay", sgd.weight_decay());
      (*optimizer.mutable_attributes())["nesterov"].set_bool_value(sgd.nesterov());
      state_names = {"optimizer.momentum_buffer."};
    } else {
      const job::AdamWOptimizer& adamw = settings.adamw();
      optimizer.set_op_type("adamw");
      SetFloat(&optimizer, "lr", adamw.learning_rate());
      SetFloat(&optimizer, "beta1", adamw.beta1() != 0 ? adamw.beta1() : 0.9);
      SetFloat(&optimizer, "beta2", adamw.beta2() != 0 ? adamw.beta2() : 0.999);
      SetFloat(&optimizer, "epsilon", adamw.epsilon() != 0 ? adamw.epsilon() : 1e-8);
      SetFloat(&optimizer, "weight_decay", adamw.weight_decay());
      state_names = {"optimizer.exp_avg.", "optimizer.exp_avg_sq."};
    }
    for (std::string& state : state_names) state += node.name;
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
              kernels_.Add(CheckpointSlice(state, logical, window)));
        }
      }
    }
    return absl::OkStatus();
  }

  // --- Ops --------------------------------------------------------------------------------------

  absl::Status LowerOp(const LogicalNode& node) {
    std::vector<std::vector<std::string>> inputs;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      absl::StatusOr<std::vector<std::string>> registers =
          Materialize(node.inputs[i], node.placement, node.input_sbp[i], node.once_per_step);
      if (!registers.ok()) {
        return absl::Status(
            registers.status().code(),
            absl::StrCat("op '", node.name, "': input '", graph_.tensors[node.inputs[i]].name,
                         "': ", registers.status().message()));
      }
      inputs.push_back(std::move(*registers));
    }
    for (int output : node.outputs) local_registers_[output].clear();
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
      plan::Task* task = AddTask(absl::StrCat(node.name, "@", rank), plan::COMPUTE,
                                 node.placement.device(rank), plan::STREAM_COMPUTE);
      // Backward first: with credits bounding the stashed activations, 1F1B emerges.
      if (node.backward) task->set_priority(1);
      op_of_task_[task->name()] = &node;
      for (size_t i = 0; i < node.inputs.size(); ++i) task->add_inputs(inputs[i][rank]);
      for (int output : node.outputs) {
        const LogicalTensor& tensor = graph_.tensors[output];
        context.output_sbp.push_back(tensor.sbp);
        Shape local = LocalWindowOf(tensor.type.shape, node.placement, tensor.sbp, rank).shape;
        context.local_outputs.push_back(TensorType{local, tensor.type.data_type});
        std::string reg =
            AddRegister(absl::StrCat(tensor.name, "@", rank), local, tensor.type.data_type);
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
  absl::Status LowerFetch(int tensor_id) {
    const LogicalTensor& tensor = graph_.tensors[tensor_id];
    const Placement& placement = PlacementOf(tensor_id);
    absl::StatusOr<std::vector<std::string>> registers =
        Materialize(tensor_id, placement, tensor.sbp, /*per_step=*/false);
    if (!registers.ok()) return registers.status();
    plan::Fetch* fetch = plan_.add_fetches();
    fetch->set_tensor(tensor.name);
    for (int64_t extent : tensor.type.shape.dimensions())
      fetch->mutable_logical()->add_shape(extent);
    fetch->mutable_logical()->set_data_type(tensor.type.data_type);
    for (int64_t extent : placement.hierarchy()) fetch->add_hierarchy(extent);
    for (const Sbp& sbp : tensor.sbp) fetch->add_sbp(sbp.ToString());
    fetch->set_summed_over_step(std::find(graph_.summed_fetches.begin(),
                                          graph_.summed_fetches.end(),
                                          tensor_id) != graph_.summed_fetches.end());
    for (int rank = 0; rank < placement.size(); ++rank) {
      std::string name = absl::StrCat("fetch:", tensor.name, "@", rank);
      plan::Task* task = AddTask(name, plan::SINK, placement.device(rank), plan::STREAM_COMPUTE);
      task->add_inputs((*registers)[rank]);
      fetch->add_sinks(name);
    }
    return absl::OkStatus();
  }

  // --- Boxing ---------------------------------------------------------------------------------

  static NdSbp Canonical(const Placement& placement, NdSbp sbp) {
    for (size_t axis = 0; axis < sbp.size(); ++axis) {
      if (placement.hierarchy()[axis] == 1) sbp[axis] = Sbp::Broadcast();
    }
    return sbp;
  }

  bool PerStep(int tensor_id) const {
    const LogicalNode& producer = graph_.nodes[graph_.tensors[tensor_id].producer];
    return producer.kind == LogicalNode::Kind::kVariable || producer.once_per_step;
  }

  // The registers (per rank of `to_placement`) holding `tensor` as `to_sbp`, once per step or
  // once per micro-batch; built once per distinct conversion and shared by every consumer that
  // needs it. With micro-batches, a per-micro-batch tensor read once per step is summed over the
  // step's micro-batches (ACCUMULATE) before boxing, and a per-step tensor read per micro-batch is
  // boxed, then repeated (REPEAT).
  absl::StatusOr<std::vector<std::string>> Materialize(int tensor_id, const Placement& to_placement,
                                                       const NdSbp& to_sbp, bool per_step) {
    const bool from_per_step = PerStep(tensor_id);
    if (graph_.num_micro_batches == 1 || from_per_step == per_step) {
      return Box(tensor_id, /*accumulated=*/false, to_placement, to_sbp);
    }
    if (!from_per_step) return Box(tensor_id, /*accumulated=*/true, to_placement, to_sbp);
    absl::StatusOr<std::vector<std::string>> boxed =
        Box(tensor_id, /*accumulated=*/false, to_placement, to_sbp);
    if (!boxed.ok()) return boxed.status();
    const LogicalTensor& tensor = graph_.tensors[tensor_id];
    std::string key = absl::StrCat(tensor_id, "|", to_placement.ToString(), "|",
                                   NdSbpToString(to_sbp), "|repeat");
    auto cached = materialized_.find(key);
    if (cached != materialized_.end()) return cached->second;
    const std::string label = NextLabel(tensor.name);
    std::vector<std::string> repeated;
    for (int rank = 0; rank < to_placement.size(); ++rank) {
      Shape local = LocalWindowOf(tensor.type.shape, to_placement, to_sbp, rank).shape;
      std::string reg = AddRegister(absl::StrCat(tensor.name, "~", label, "@", rank), local,
                                    tensor.type.data_type);
      plan::Task* task = AddTask(absl::StrCat("repeat:", tensor.name, "~", label, "@", rank),
                                 plan::REPEAT, to_placement.device(rank), plan::STREAM_COMPUTE);
      task->set_factor(graph_.num_micro_batches);
      task->add_inputs((*boxed)[rank]);
      task->add_outputs(reg);
      repeated.push_back(std::move(reg));
    }
    materialized_[key] = repeated;
    return repeated;
  }

  // Per rank of the producer: the sum of the step's micro-batch pieces of a tensor.
  absl::StatusOr<std::vector<std::string>> Accumulated(int tensor_id) {
    auto cached = accumulated_.find(tensor_id);
    if (cached != accumulated_.end()) return cached->second;
    const LogicalTensor& tensor = graph_.tensors[tensor_id];
    if (tensor.type.data_type != plan::FLOAT32) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor '", tensor.name, "' (", tensor.type.ToString(),
          ") is produced per micro-batch and read once per step, but only float32 tensors can be "
          "summed over micro-batches"));
    }
    const Placement& placement = PlacementOf(tensor_id);
    std::vector<std::string> sums;
    for (int rank = 0; rank < placement.size(); ++rank) {
      Shape local = LocalWindowOf(tensor.type.shape, placement, tensor.sbp, rank).shape;
      std::string reg =
          AddRegister(absl::StrCat(tensor.name, "~sum@", rank), local, tensor.type.data_type);
      plan::Task* task = AddTask(absl::StrCat("accumulate:", tensor.name, "@", rank),
                                 plan::ACCUMULATE, placement.device(rank), plan::STREAM_COMPUTE);
      task->set_factor(graph_.num_micro_batches);
      task->add_inputs(local_registers_[tensor_id][rank]);
      task->add_outputs(reg);
      sums.push_back(std::move(reg));
    }
    accumulated_[tensor_id] = sums;
    return sums;
  }

  // Boxing of `tensor` (its registers, or their per-step sums when `accumulated`) to
  // `to_placement` and `to_sbp`.
  absl::StatusOr<std::vector<std::string>> Box(int tensor_id, bool accumulated,
                                               const Placement& to_placement, const NdSbp& to_sbp) {
    const LogicalTensor& tensor = graph_.tensors[tensor_id];
    const Placement& from_placement = PlacementOf(tensor_id);
    std::vector<std::string> registers = local_registers_[tensor_id];
    if (accumulated) {
      absl::StatusOr<std::vector<std::string>> sums = Accumulated(tensor_id);
      if (!sums.ok()) return sums.status();
      registers = *sums;
    }
    // On a hierarchy axis of one device every SBP lays the tensor out alike.
    const NdSbp from_sbp = Canonical(from_placement, tensor.sbp);
    const NdSbp canonical_to_sbp = Canonical(to_placement, to_sbp);
    if (from_placement == to_placement && from_sbp == canonical_to_sbp) return registers;
    std::string key = absl::StrCat(tensor_id, "|", to_placement.ToString(), "|",
                                   NdSbpToString(canonical_to_sbp), accumulated ? "|sum" : "");
    auto cached = materialized_.find(key);
    if (cached != materialized_.end()) return cached->second;

    absl::StatusOr<BoxingPlan> boxing =
        PlanBoxing(tensor.type, from_placement, from_sbp, to_placement, canonical_to_sbp);
    if (!boxing.ok()) return boxing.status();
    // Collectives of per-step and per-micro-batch tensors run different numbers of times per
    // step, so they use different communicators (each runs its collectives in one fixed order).
    const bool per_step = accumulated || PerStep(tensor_id);
    for (const BoxingStep& step : boxing->source_steps) {
      registers = ApplyStep(tensor, from_placement, step, registers, per_step);
    }
    if (boxing->crosses_placements) {
      std::string label = NextLabel(tensor.name);
      std::vector<std::string> copied;
      for (int rank = 0; rank < to_placement.size(); ++rank) {
        int source_rank = boxing->one_to_one ? rank : 0;
        NdSbp sbp = boxing->one_to_one ? to_sbp : NdSbp(to_placement.num_axes(), Sbp::Broadcast());
        Shape local = LocalWindowOf(tensor.type.shape, to_placement, sbp, rank).shape;
        std::string reg = AddRegister(absl::StrCat(tensor.name, "~", label, "@", rank), local,
                                      tensor.type.data_type);
        plan::Task* task = AddTask(absl::StrCat("copy:", tensor.name, "~", label, "@", rank),
                                   plan::COPY, to_placement.device(rank), plan::STREAM_COPY_IN);
        task->add_inputs(registers[source_rank]);
        task->add_outputs(reg);
        copied.push_back(reg);
      }
      registers = std::move(copied);
      for (const BoxingStep& step : boxing->destination_steps) {
        registers = ApplyStep(tensor, to_placement, step, registers, per_step);
      }
    }
    materialized_[key] = registers;
    return registers;
  }

  // The task writing each register, by name: views into plan_'s tasks, valid while none is added.
  using Producers = absl::flat_hash_map<absl::string_view, const plan::Task*>;

  Producers ProducersOf() const {
    Producers producers;
    producers.reserve(plan_.registers_size());
    for (const plan::Task& task : plan_.tasks()) {
      for (const std::string& output : task.outputs()) producers[output] = &task;
    }
    return producers;
  }

  // A register read only on its producer's stream gets one slot: the stream runs one act at a
  // time, so a second slot could only let the producer run a piece ahead of work it would wait
  // for anyway, and would double the register's memory (every intermediate of a model on one GPU).
  // Registers read on other streams, devices or nodes keep the job's slots, which let producer
  // and consumers overlap. Variables have one slot already.
  void SetSameStreamSlots(const Producers& producers) {
    absl::flat_hash_set<absl::string_view> read_elsewhere;
    for (const plan::Task& task : plan_.tasks()) {
      for (const std::string& input : task.inputs()) {
        auto producer = producers.find(input);
        if (producer == producers.end() || !SameStream(producer->second->stream(), task.stream())) {
          read_elsewhere.insert(input);
        }
      }
    }
    for (plan::RegisterDesc& reg : *plan_.mutable_registers()) {
      if (producers.contains(reg.name()) && !read_elsewhere.contains(reg.name())) {
        reg.set_num_slots(1);
      }
    }
  }

  // A register holding forward data that a backward op of stage s reads is a stashed activation;
  // it gets p - s slots (one-forward-one-backward) or num_micro_batches (GPipe), so that the
  // credits alone bound the micro-batches in flight on each stage. A job without pipeline stages
  // is one stage: its stashed activations get one slot, as a second one could only let a forward
  // run ahead of the backward that frees the first (on the device's one compute stream, it would
  // buy no overlap and cost the memory of every activation again).
  void SetStashSlots(const Producers& producer) {
    if (std::none_of(graph_.nodes.begin(), graph_.nodes.end(),
                     [](const LogicalNode& node) { return node.backward; })) {
      return;  // nothing is stashed for a backward
    }
    const bool pipelined = graph_.num_stages >= 1;
    auto is_backward = [&](const plan::Task& task) {
      auto found = op_of_task_.find(task.name());
      return found != op_of_task_.end() && found->second->backward;
    };
    absl::flat_hash_map<absl::string_view, int> slots;
    for (const plan::Task& task : plan_.tasks()) {
      if (!is_backward(task)) continue;
      const LogicalNode& node = *op_of_task_.at(task.name());
      if (pipelined && !node.stage.has_value()) continue;
      const int stash = !pipelined                               ? 1
                        : graph_.pipeline_schedule == job::GPIPE ? graph_.num_micro_batches
                                                                 : graph_.num_stages - *node.stage;
      for (const std::string& input : task.inputs()) {
        auto found = producer.find(input);
        if (found == producer.end() || is_backward(*found->second)) continue;
        int& count = slots[input];
        count = std::max(count, stash);
      }
    }
    for (plan::RegisterDesc& reg : *plan_.mutable_registers()) {
      auto found = slots.find(reg.name());
      // Variables keep their single slot.
      if (found != slots.end() && producer.at(reg.name())->kind() != plan::VARIABLE) {
        reg.set_num_slots(std::max(found->second, 1));
      }
    }
  }

  std::string NextLabel(const std::string& tensor_name) {
    return absl::StrCat(++boxing_count_[tensor_name]);
  }

  // The communicator of a group of ranks for per-step or per-micro-batch tensors (created on
  // first use).
  plan::Communicator& CommunicatorOf(const Placement& placement, const std::vector<int>& group,
                                     bool per_step) {
    std::vector<std::string> keys;
    for (int rank : group) keys.push_back(DeviceSortKey(placement.device(rank)));
    std::string key = absl::StrJoin(keys, ",");
    if (per_step && graph_.num_micro_batches > 1) key += "|step";
    auto found = communicators_.find(key);
    if (found != communicators_.end()) return found->second;
    plan::Communicator& communicator = communicators_[key];
    communicator.set_name(absl::StrCat("comm", communicators_.size() - 1));
    for (int rank : group) *communicator.add_devices() = placement.device(rank);
    return communicator;
  }

  int StreamIndexOf(const plan::Device& device, const std::string& communicator) {
    auto& streams = communication_streams_[DeviceKey::Of(device)];
    auto found = streams.find(communicator);
    if (found != streams.end()) return found->second;
    int index = static_cast<int>(streams.size());
    streams[communicator] = index;
    return index;
  }

  std::vector<std::string> ApplyStep(const LogicalTensor& tensor, const Placement& placement,
                                     const BoxingStep& step,
                                     const std::vector<std::string>& registers, bool per_step) {
    const std::string label = NextLabel(tensor.name);
    std::vector<std::string> result(placement.size());
    const int h = step.hierarchy_axis;
    for (int rank = 0; rank < placement.size(); ++rank) {
      LocalWindow before = LocalWindowOf(tensor.type.shape, placement, step.from, rank);
      LocalWindow after = LocalWindowOf(tensor.type.shape, placement, step.to, rank);
      const plan::Device& device = placement.device(rank);
      std::string reg = absl::StrCat(tensor.name, "~", label, "@", rank);
      std::string task_name = absl::StrCat("box:", tensor.name, "~", label, "@", rank);
      if (step.kind == BoxingStep::Kind::kZeroFill && placement.Coordinates(rank)[h] == 0) {
        result[rank] = registers[rank];  // the first member keeps the value
        continue;
      }
      AddRegister(reg, after.shape, tensor.type.data_type);
      result[rank] = reg;
      plan::Task* task;
      if (step.is_collective()) {
        std::vector<int> group = placement.GroupAlong(rank, h);
        plan::Communicator& communicator = CommunicatorOf(placement, group, per_step);
        int position = static_cast<int>(placement.Coordinates(rank)[h]);
        if (position == 0) {
          sequence_of_group_step_[absl::StrCat(label, "|", group[0])] =
              communicator.num_collectives();
          communicator.set_num_collectives(communicator.num_collectives() + 1);
        }
        int64_t sequence = sequence_of_group_step_[absl::StrCat(label, "|", group[0])];
        task = AddTask(task_name, plan::COLLECTIVE, device, plan::STREAM_COMMUNICATION,
                       StreamIndexOf(device, communicator.name()));
        task->set_rank(position);
        plan::CollectiveConf* conf = task->mutable_collective();
        conf->set_communicator(communicator.name());
        conf->set_sequence(sequence);
        conf->set_name(absl::StrCat(tensor.name, "~", label));
        conf->set_reduce(step.reduce_max ? plan::REDUCE_MAX : plan::REDUCE_SUM);
        conf->set_axis(step.axis);
        conf->set_concat_axis(step.concat_axis);
        switch (step.kind) {
          case BoxingStep::Kind::kAllGather:
            conf->set_kind(plan::ALL_GATHER);
            break;
          case BoxingStep::Kind::kAllReduce:
            conf->set_kind(plan::ALL_REDUCE);
            break;
          case BoxingStep::Kind::kReduceScatter:
            conf->set_kind(plan::REDUCE_SCATTER);
            break;
          default:
            conf->set_kind(plan::ALL_TO_ALL);
            break;
        }
      } else {
        task = AddTask(task_name, plan::COMPUTE, device, plan::STREAM_COMPUTE);
        plan::KernelConf kernel;
        std::vector<int64_t> begin(tensor.type.shape.rank());
        if (step.kind == BoxingStep::Kind::kLocalSlice) {
          kernel.set_op_type("slice");
          std::vector<int64_t> end(tensor.type.shape.rank());
          for (int axis = 0; axis < tensor.type.shape.rank(); ++axis) {
            begin[axis] = after.begin[axis] - before.begin[axis];
            end[axis] = begin[axis] + after.shape.dimension(axis);
          }
          SetIntList(&kernel, "begin", begin);
          SetIntList(&kernel, "end", end);
        } else if (step.kind == BoxingStep::Kind::kLocalPad) {
          kernel.set_op_type("pad");
          for (int axis = 0; axis < tensor.type.shape.rank(); ++axis) {
            begin[axis] = before.begin[axis] - after.begin[axis];
          }
          SetIntList(&kernel, "begin", begin);
        } else {
          kernel.set_op_type("zeros_like");
        }
        task->set_kernel_index(kernels_.Add(std::move(kernel)));
      }
      task->add_inputs(registers[rank]);
      task->add_outputs(reg);
    }
    return result;
  }

  const LogicalGraph& graph_;
  const DeviceSet& devices_;
  const int64_t max_tasks_;  // 0: no limit
  plan::Plan plan_;
  // The plan's kernel configurations, each held once (an op's ranks mostly share theirs).
  SharedKernels kernels_{&plan_};
  std::vector<std::vector<std::string>> local_registers_;  // by tensor: register per rank
  absl::flat_hash_map<std::string, std::vector<std::string>> materialized_;
  absl::flat_hash_map<std::string, int> boxing_count_;
  // By member devices (sorted, so the plan is deterministic).
  std::map<std::string, plan::Communicator> communicators_;
  absl::flat_hash_map<DeviceKey, absl::flat_hash_map<std::string, int>> communication_streams_;
  absl::flat_hash_map<std::string, int64_t> sequence_of_group_step_;
  // Variable name -> its VARIABLE task per rank (positions in plan_.tasks()).
  absl::flat_hash_map<std::string, std::vector<int>> variable_tasks_;
  // Tensor id -> its per-step sums per rank.
  absl::flat_hash_map<int, std::vector<std::string>> accumulated_;
  // Gradient buckets made so far (their names count up).
  int buckets_ = 0;
  // The logical op of each op task.
  absl::flat_hash_map<std::string, const LogicalNode*> op_of_task_;
};

}  // namespace

absl::StatusOr<plan::Plan> LowerToPlan(const LogicalGraph& graph, const DeviceSet& devices,
                                       int64_t max_tasks) {
  return Lowering(graph, devices, max_tasks).Run();
}

}  // namespace loom::compiler
