#include "runtime/plan_validation.h"

#include <deque>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/actor_id.h"
#include "runtime/data_type.h"
#include "runtime/device_name.h"
#include "runtime/tensor.h"

namespace loom {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

std::string DeviceKey(const plan::Device& device) { return DeviceName(device); }

bool SameDevice(const plan::Device& a, const plan::Device& b) {
  return a.node() == b.node() && a.type() == b.type() && a.index() == b.index();
}

absl::Status CheckDevices(const plan::Plan& plan, absl::flat_hash_set<std::string>* devices) {
  for (const plan::DeviceDesc& desc : plan.devices()) {
    const plan::Device& device = desc.device();
    std::string name = DeviceKey(device);
    if (device.type() == plan::DEVICE_TYPE_UNSPECIFIED) {
      return Invalid(absl::StrCat("device ", name, " has no type (cpu or cuda)"));
    }
    if (device.index() < 0 || device.index() > ActorId::kMaxDeviceIndex) {
      return Invalid(absl::StrCat("device ", name, " has an index outside [0, ",
                                  ActorId::kMaxDeviceIndex, "]"));
    }
    if (device.node() != plan.node()) {
      return Invalid(absl::StrCat("device ", name, " is not on this plan's node ", plan.node()));
    }
    if (desc.memory_budget_bytes() < 0) {
      return Invalid(absl::StrCat("device ", name, " has a negative memory budget"));
    }
    if (!devices->insert(name).second) {
      return Invalid(absl::StrCat("device ", name, " is declared twice"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckRegisters(const plan::Plan& plan,
                            absl::flat_hash_map<std::string, int>* register_position) {
  for (int i = 0; i < plan.registers_size(); ++i) {
    const plan::RegisterDesc& reg = plan.registers(i);
    if (reg.name().empty()) return Invalid(absl::StrCat("register #", i, " has no name"));
    if (!register_position->emplace(reg.name(), i).second) {
      return Invalid(absl::StrCat("register '", reg.name(), "' is declared twice"));
    }
    if (reg.num_slots() < 1) {
      return Invalid(absl::StrCat("register '", reg.name(), "' has ", reg.num_slots(),
                                  " slots: every register needs at least one slot (its credits)"));
    }
    if (DataTypeSize(reg.tensor().data_type()) == 0) {
      return Invalid(absl::StrCat("register '", reg.name(), "' has no data type"));
    }
    for (int64_t dimension : reg.tensor().shape()) {
      if (dimension < 0) {
        return Invalid(absl::StrCat("register '", reg.name(), "' has a negative dimension in ",
                                    Shape(reg.tensor().shape()).ToString()));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckArity(const plan::Task& task, int min_inputs, int max_inputs, int min_outputs,
                        int max_outputs, const char* kind) {
  auto range = [](int low, int high) {
    if (low == high) return absl::StrCat(low);
    if (high < 0) return absl::StrCat("at least ", low);
    return absl::StrCat(low, " to ", high);
  };
  if (task.inputs_size() < min_inputs || (max_inputs >= 0 && task.inputs_size() > max_inputs)) {
    return Invalid(absl::StrCat("task '", task.name(), "': a ", kind, " task reads ",
                                range(min_inputs, max_inputs), " registers, not ",
                                task.inputs_size()));
  }
  if (task.outputs_size() < min_outputs ||
      (max_outputs >= 0 && task.outputs_size() > max_outputs)) {
    return Invalid(absl::StrCat("task '", task.name(), "': a ", kind, " task writes ",
                                range(min_outputs, max_outputs), " registers, not ",
                                task.outputs_size()));
  }
  return absl::OkStatus();
}

absl::Status CheckKind(const plan::Task& task, const plan::Plan& plan,
                       const absl::flat_hash_map<std::string, int>& register_position) {
  auto desc = [&](const std::string& name) -> const plan::RegisterDesc& {
    return plan.registers(register_position.at(name));
  };
  switch (task.kind()) {
    case plan::COMPUTE:
      if (task.kernel().op_type().empty()) {
        return Invalid(absl::StrCat("task '", task.name(), "': a compute task needs kernel.op_type"));
      }
      return CheckArity(task, 0, -1, 1, -1, "compute");
    case plan::SOURCE:
      if (task.num_pieces() < 0) {
        return Invalid(absl::StrCat("task '", task.name(), "': num_pieces is negative"));
      }
      if (task.kernel().op_type().empty()) {
        return Invalid(absl::StrCat("task '", task.name(),
                                    "': a source task needs kernel.op_type to fill its pieces"));
      }
      return CheckArity(task, 0, 0, 1, -1, "source");
    case plan::SINK:
      return CheckArity(task, 1, -1, 0, 0, "sink");
    case plan::COPY: {
      if (absl::Status status = CheckArity(task, 1, 1, 1, 1, "copy"); !status.ok()) return status;
      const plan::TensorDesc& in = desc(task.inputs(0)).tensor();
      const plan::TensorDesc& out = desc(task.outputs(0)).tensor();
      if (in.data_type() != out.data_type() ||
          Shape(in.shape()).NumElements() != Shape(out.shape()).NumElements()) {
        return Invalid(absl::StrCat("task '", task.name(), "': a copy needs the same data type "
                                    "and element count on both sides, not ",
                                    DataTypeName(in.data_type()), Shape(in.shape()).ToString(),
                                    " -> ", DataTypeName(out.data_type()),
                                    Shape(out.shape()).ToString()));
      }
      return absl::OkStatus();
    }
    case plan::UNPACK:
    case plan::REPEAT:
    case plan::ACCUMULATE: {
      const char* kind = task.kind() == plan::UNPACK   ? "unpack"
                         : task.kind() == plan::REPEAT ? "repeat"
                                                       : "accumulate";
      if (absl::Status status = CheckArity(task, 1, 1, 1, 1, kind); !status.ok()) return status;
      if (task.factor() < 1) {
        return Invalid(absl::StrCat("task '", task.name(), "': a ", kind,
                                    " task needs factor >= 1 (the number of micro-batches), not ",
                                    task.factor()));
      }
      const plan::TensorDesc& in = desc(task.inputs(0)).tensor();
      const plan::TensorDesc& out = desc(task.outputs(0)).tensor();
      if (in.data_type() != out.data_type()) {
        return Invalid(absl::StrCat("task '", task.name(), "': input and output data types differ"));
      }
      Shape in_shape(in.shape());
      Shape out_shape(out.shape());
      if (task.kind() == plan::UNPACK) {
        Shape expected = in_shape;
        if (expected.rank() == 0 || expected.dimension(0) % task.factor() != 0) {
          return Invalid(absl::StrCat("task '", task.name(), "': cannot unpack ",
                                      in_shape.ToString(), " into ", task.factor(),
                                      " pieces along axis 0"));
        }
        expected.set_dimension(0, expected.dimension(0) / task.factor());
        if (expected != out_shape) {
          return Invalid(absl::StrCat("task '", task.name(), "': unpacking ", in_shape.ToString(),
                                      " by ", task.factor(), " gives ", expected.ToString(),
                                      ", but the output register is ", out_shape.ToString()));
        }
      } else if (in_shape != out_shape) {
        return Invalid(absl::StrCat("task '", task.name(), "': input ", in_shape.ToString(),
                                    " and output ", out_shape.ToString(), " shapes differ"));
      }
      if (task.kind() == plan::ACCUMULATE && in.data_type() != plan::FLOAT32) {
        return Invalid(absl::StrCat("task '", task.name(), "': accumulate supports float32 only"));
      }
      return absl::OkStatus();
    }
    default:
      return Invalid(absl::StrCat("task '", task.name(), "' has no kind"));
  }
}

// Kahn's algorithm; on a cycle, walks it to name its tasks.
absl::Status CheckAcyclic(const plan::Plan& plan,
                          const std::vector<std::vector<int>>& successors) {
  int count = plan.tasks_size();
  std::vector<int> in_degree(count, 0);
  for (const auto& next : successors) {
    for (int successor : next) ++in_degree[successor];
  }
  std::deque<int> frontier;
  for (int i = 0; i < count; ++i) {
    if (in_degree[i] == 0) frontier.push_back(i);
  }
  int visited = 0;
  while (!frontier.empty()) {
    int task = frontier.front();
    frontier.pop_front();
    ++visited;
    for (int successor : successors[task]) {
      if (--in_degree[successor] == 0) frontier.push_back(successor);
    }
  }
  if (visited == count) return absl::OkStatus();
  // Every remaining task has a remaining predecessor: walk successors until one repeats.
  int start = 0;
  while (in_degree[start] == 0) ++start;
  std::vector<int> order;
  std::vector<int> seen_at(count, -1);
  int current = start;
  while (seen_at[current] < 0) {
    seen_at[current] = static_cast<int>(order.size());
    order.push_back(current);
    for (int successor : successors[current]) {
      if (in_degree[successor] > 0) {
        current = successor;
        break;
      }
    }
  }
  std::vector<std::string> names;
  for (size_t i = seen_at[current]; i < order.size(); ++i) {
    names.push_back(absl::StrCat("'", plan.tasks(order[i]).name(), "'"));
  }
  names.push_back(absl::StrCat("'", plan.tasks(current).name(), "'"));
  return Invalid(absl::StrCat("cycle that can never act: ", absl::StrJoin(names, " -> "),
                              " (each task waits for the previous one's output)"));
}

}  // namespace

uint32_t TaskIndex(const plan::Plan& plan, int position) {
  const plan::Task& task = plan.tasks(position);
  return task.has_index() ? task.index() : static_cast<uint32_t>(position);
}

absl::Status ValidatePlan(const plan::Plan& plan) {
  if (plan.tasks_size() == 0) return Invalid("the plan has no tasks");
  if (plan.node() < 0 || plan.node() > ActorId::kMaxNode) {
    return Invalid(absl::StrCat("the plan's node ", plan.node(), " is out of range"));
  }
  absl::flat_hash_set<std::string> devices;
  if (absl::Status status = CheckDevices(plan, &devices); !status.ok()) return status;
  absl::flat_hash_map<std::string, int> register_position;
  if (absl::Status status = CheckRegisters(plan, &register_position); !status.ok()) return status;

  absl::flat_hash_map<std::string, int> task_position;
  absl::flat_hash_set<uint32_t> indices;
  std::vector<int> producer(plan.registers_size(), -1);
  std::vector<std::vector<int>> consumers(plan.registers_size());
  for (int i = 0; i < plan.tasks_size(); ++i) {
    const plan::Task& task = plan.tasks(i);
    if (task.name().empty()) return Invalid(absl::StrCat("task #", i, " has no name"));
    if (!task_position.emplace(task.name(), i).second) {
      return Invalid(absl::StrCat("task '", task.name(), "' is declared twice"));
    }
    uint32_t index = TaskIndex(plan, i);
    if (index > ActorId::kMaxTaskIndex) {
      return Invalid(absl::StrCat("task '", task.name(), "' has index ", index, " above ",
                                  ActorId::kMaxTaskIndex));
    }
    if (!indices.insert(index).second) {
      return Invalid(absl::StrCat("task '", task.name(), "' has index ", index,
                                  ", which another task has too"));
    }
    const plan::Stream& stream = task.stream();
    if (!devices.contains(DeviceKey(stream.device()))) {
      return Invalid(absl::StrCat("task '", task.name(), "' runs on device ",
                                  DeviceName(stream.device()),
                                  ", which is not among the plan's devices"));
    }
    if (stream.index() < 0 || stream.index() > ActorId::kMaxStreamIndex) {
      return Invalid(absl::StrCat("task '", task.name(), "' has a stream index outside [0, ",
                                  ActorId::kMaxStreamIndex, "]"));
    }
    for (const std::string& name : task.inputs()) {
      auto found = register_position.find(name);
      if (found == register_position.end()) {
        return Invalid(absl::StrCat("task '", task.name(), "' reads register '", name,
                                    "', which is not declared"));
      }
      consumers[found->second].push_back(i);
    }
    for (const std::string& name : task.outputs()) {
      auto found = register_position.find(name);
      if (found == register_position.end()) {
        return Invalid(absl::StrCat("task '", task.name(), "' writes register '", name,
                                    "', which is not declared"));
      }
      if (producer[found->second] >= 0) {
        return Invalid(absl::StrCat("register '", name, "' is produced by both '",
                                    plan.tasks(producer[found->second]).name(), "' and '",
                                    task.name(), "'"));
      }
      producer[found->second] = i;
    }
  }

  std::vector<std::vector<int>> successors(plan.tasks_size());
  for (int r = 0; r < plan.registers_size(); ++r) {
    const plan::RegisterDesc& reg = plan.registers(r);
    if (producer[r] < 0) {
      if (consumers[r].empty()) {
        return Invalid(absl::StrCat("dangling register '", reg.name(), "': no task produces it"));
      }
      return Invalid(absl::StrCat("dangling register '", reg.name(), "': read by '",
                                  plan.tasks(consumers[r][0]).name(),
                                  "' but produced by no task"));
    }
    const plan::Task& producer_task = plan.tasks(producer[r]);
    if (!reg.producer().empty() && reg.producer() != producer_task.name()) {
      return Invalid(absl::StrCat("register '", reg.name(), "' says its producer is '",
                                  reg.producer(), "', but '", producer_task.name(),
                                  "' writes it"));
    }
    if (reg.consumers_size() > 0) {
      absl::flat_hash_set<std::string> declared(reg.consumers().begin(), reg.consumers().end());
      absl::flat_hash_set<std::string> actual;
      for (int consumer : consumers[r]) actual.insert(plan.tasks(consumer).name());
      if (declared != actual) {
        return Invalid(absl::StrCat("register '", reg.name(),
                                    "' lists consumers that differ from the tasks reading it"));
      }
    }
    for (int consumer : consumers[r]) {
      const plan::Task& consumer_task = plan.tasks(consumer);
      const plan::Device& from = producer_task.stream().device();
      const plan::Device& to = consumer_task.stream().device();
      bool shared_host_memory = from.node() == to.node() && from.type() == plan::CPU &&
                                to.type() == plan::CPU;
      if (!SameDevice(from, to) && !shared_host_memory && consumer_task.kind() != plan::COPY) {
        return Invalid(absl::StrCat("task '", consumer_task.name(), "' on ", DeviceName(to),
                                    " reads register '", reg.name(), "' on ", DeviceName(from),
                                    ": a copy task must move it between these devices"));
      }
      successors[producer[r]].push_back(consumer);
    }
  }
  for (const plan::Task& task : plan.tasks()) {
    if (absl::Status status = CheckKind(task, plan, register_position); !status.ok()) {
      return status;
    }
  }
  return CheckAcyclic(plan, successors);
}

}  // namespace loom
