#include "compiler/memory_plan.h"

#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/parallel_for.h"
#include "core/checked_arithmetic.h"
#include "core/collective_backend_kind.h"
#include "core/collective_staging.h"
#include "core/data_type.h"
#include "core/device_key.h"
#include "core/device_name.h"
#include "core/format_bytes.h"
#include "core/host_buffer_layout.h"
#include "core/tensor.h"

namespace loom::compiler {
namespace {

constexpr int64_t kSaturated = std::numeric_limits<int64_t>::max();

// Sums and products of byte counts (non-negative): INT64_MAX when the exact value does not fit,
// which every budget and kMaxDeviceMemoryBytes then refuses. Never a wrapped count.
int64_t SaturatedAdd(int64_t a, int64_t b) { return CheckedAdd(a, b).value_or(kSaturated); }
int64_t SaturatedMultiply(int64_t a, int64_t b) {
  return CheckedMultiply(a, b).value_or(kSaturated);
}

// What a buffer of `bytes` takes on `device`: on a CPU device, what the runtime's host allocator
// lays out (huge pages from 1 MiB: core/host_buffer_layout.h). For the host devices of a GPU
// job, whose pinned buffers take their bytes, this is an upper bound.
int64_t BufferBytes(int64_t bytes, const plan::Device& device) {
  // Beyond a tensor's limit (a saturated size) there is no layout to compute: it stays as large.
  if (bytes > kMaxTensorBytes) return bytes;
  return device.type() == plan::CPU ? LayOutHostBuffer(bytes).footprint_bytes : bytes;
}

// What one device will hold, with the holders an error names.
struct DeviceHoldings {
  DeviceMemoryEstimate estimate;
  // Bytes and name of each register, for the device Holdings was asked to name them for only.
  std::vector<std::pair<int64_t, std::string>> registers;
  std::map<std::string, int64_t> staging;  // bytes by communicator
};

// A node plan's registers by name.
using RegisterIndex = absl::flat_hash_map<absl::string_view, const plan::RegisterDesc*>;

RegisterIndex IndexRegisters(const plan::Plan& plan) {
  RegisterIndex registers;
  for (const plan::RegisterDesc& reg : plan.registers()) registers[reg.name()] = &reg;
  return registers;
}

// One collective's tasks across the node plans: every rank's input shape.
struct CollectiveRanks {
  const plan::CollectiveConf* conf = nullptr;
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  std::vector<std::optional<Shape>> inputs;  // by rank
};

// A register's slot; INT64_MAX for a tensor beyond the limits (the compiler emits none, and the
// runtime's plan validation refuses one), so that it exceeds every budget.
int64_t SlotBytes(const plan::RegisterDesc& reg) {
  return CheckedTensorBytes(reg.tensor().shape(), reg.tensor().data_type()).value_or(kSaturated);
}

// The registers of `plan` (naming those of device `named_device`), and the variables' and
// accumulators' own buffers.
void AddTaskBuffers(const plan::Plan& plan, const RegisterIndex& registers,
                    const absl::flat_hash_map<DeviceKey, int>& position, int named_device,
                    std::vector<DeviceHoldings>& holdings) {
  auto slot_bytes_of = [&](const std::string& name) -> int64_t {
    auto found = registers.find(name);
    return found == registers.end() ? 0 : SlotBytes(*found->second);
  };
  // What each register holds, from the kinds of the tasks that write and read it, in the order
  // in which they win: a variable's value is a parameter whoever reads it, a buffer that peers
  // read or write is communication, then gradients.
  enum class Holds { kActivation, kGradient, kCommunication, kParameter };
  struct RegisterFacts {
    int device = -1;  // the position of its producer's device; -1: none of the holdings'
    Holds holds = Holds::kActivation;
  };
  absl::flat_hash_map<absl::string_view, RegisterFacts> facts;
  facts.reserve(plan.registers_size());
  for (const plan::Task& task : plan.tasks()) {
    const bool communicates = task.kind() == plan::COLLECTIVE || task.kind() == plan::SEND ||
                              task.kind() == plan::RECEIVE;
    const bool updates = task.kind() == plan::VARIABLE || task.kind() == plan::ACCUMULATE;
    if (communicates || updates) {
      // Ordering inputs (Task.ordering_inputs) are only waited for: not what it moves.
      for (int i = 0; i < task.inputs_size() - task.ordering_inputs(); ++i) {
        Holds& held = facts[task.inputs(i)].holds;
        held = std::max(held, communicates ? Holds::kCommunication : Holds::kGradient);
      }
    }
    auto found = position.find(DeviceKey::Of(task.stream().device()));
    const int device = found == position.end() ? -1 : found->second;
    for (const std::string& output : task.outputs()) {
      RegisterFacts& fact = facts[output];
      fact.device = device;
      if (communicates) fact.holds = std::max(fact.holds, Holds::kCommunication);
      if (task.kind() == plan::VARIABLE) fact.holds = Holds::kParameter;
    }
    if (device < 0) continue;
    DeviceMemoryEstimate& estimate = holdings[device].estimate;
    if (task.kind() == plan::VARIABLE && task.outputs_size() > 0) {
      const int64_t bytes =
          SaturatedMultiply(BufferBytes(slot_bytes_of(task.outputs(0)), estimate.device),
                            std::max(task.num_optimizer_states(), 0));
      estimate.state_bytes = SaturatedAdd(estimate.state_bytes, bytes);
      estimate.parts.optimizer_states = SaturatedAdd(estimate.parts.optimizer_states, bytes);
    } else if (task.kind() == plan::ACCUMULATE && task.inputs_size() > 0) {
      const int64_t bytes = BufferBytes(slot_bytes_of(task.inputs(0)), estimate.device);
      estimate.state_bytes = SaturatedAdd(estimate.state_bytes, bytes);
      estimate.parts.accumulators = SaturatedAdd(estimate.parts.accumulators, bytes);
    }
  }
  for (const plan::RegisterDesc& reg : plan.registers()) {
    auto found = facts.find(reg.name());
    if (found == facts.end() || found->second.device < 0) continue;
    DeviceHoldings& device = holdings[found->second.device];
    if (reg.host_memory()) {
      plan::Device host;
      host.set_node(device.estimate.device.node());
      host.set_type(plan::CPU);
      const int64_t bytes =
          SaturatedMultiply(BufferBytes(SlotBytes(reg), host), std::max(reg.num_slots(), 0));
      device.estimate.parts.offloaded = SaturatedAdd(device.estimate.parts.offloaded, bytes);
      continue;
    }
    const int64_t bytes = SaturatedMultiply(BufferBytes(SlotBytes(reg), device.estimate.device),
                                            std::max(reg.num_slots(), 0));
    device.estimate.unshared_register_bytes =
        SaturatedAdd(device.estimate.unshared_register_bytes, bytes);
    MemoryParts& parts = device.estimate.parts;
    const Holds held = found->second.holds;
    if (!reg.pool().empty()) {
      // Its bytes are its pool's.
      int64_t& apart = held == Holds::kGradient        ? parts.pooled_gradients
                       : held == Holds::kCommunication ? parts.pooled_communication
                                                       : parts.pooled_activations;
      apart = SaturatedAdd(apart, bytes);
      continue;
    }
    int64_t& part = held == Holds::kParameter       ? parts.parameters
                    : held == Holds::kGradient      ? parts.gradients
                    : held == Holds::kCommunication ? parts.communication
                                                    : parts.activations;
    part = SaturatedAdd(part, bytes);
    device.estimate.register_bytes = SaturatedAdd(device.estimate.register_bytes, bytes);
    if (found->second.device == named_device) {
      device.registers.emplace_back(bytes, absl::StrCat("'", reg.name(), "'"));
    }
  }
  // Registers that share memory take their pools' bytes.
  for (const plan::MemoryPool& pool : plan.memory_pools()) {
    auto found = position.find(DeviceKey::Of(pool.device()));
    if (found == position.end()) continue;
    DeviceHoldings& device = holdings[found->second];
    const int64_t bytes = BufferBytes(std::max<int64_t>(pool.bytes(), 0), device.estimate.device);
    device.estimate.register_bytes = SaturatedAdd(device.estimate.register_bytes, bytes);
    device.estimate.parts.pools = SaturatedAdd(device.estimate.parts.pools, bytes);
    if (found->second == named_device) {
      device.registers.emplace_back(
          bytes, absl::StrCat("memory pool '", pool.name(), "' (shared by ", pool.num_registers(),
                              " registers)"));
    }
  }
}

// The communicators of network collectives, whose ranks hold staging buffers, by name.
using StagingCommunicators = std::map<std::string, const plan::Communicator*>;

StagingCommunicators NetworkCommunicators(absl::Span<const plan::Plan> node_plans) {
  StagingCommunicators communicators;
  for (const plan::Plan& plan : node_plans) {
    for (const plan::Communicator& communicator : plan.communicators()) {
      if (CollectiveBackendKindOf(communicator) == CollectiveBackendKind::kNetwork) {
        communicators.emplace(communicator.name(), &communicator);
      }
    }
  }
  return communicators;
}

// The collectives of network communicators, by (communicator, sequence).
using NetworkCollectiveRanks = std::map<std::pair<std::string, int64_t>, CollectiveRanks>;

// Records the input shape of each rank `plan` runs of a network collective.
void AddCollectiveInputs(const plan::Plan& plan, const RegisterIndex& registers,
                         const StagingCommunicators& communicators,
                         NetworkCollectiveRanks& collectives) {
  for (const plan::Task& task : plan.tasks()) {
    if (task.kind() != plan::COLLECTIVE) continue;
    auto communicator = communicators.find(task.collective().communicator());
    if (communicator == communicators.end()) continue;
    if (task.inputs_size() - task.ordering_inputs() != 1 || task.outputs_size() != 1) continue;
    auto input = registers.find(task.inputs(0));
    auto output = registers.find(task.outputs(0));
    const int size = communicator->second->devices_size();
    if (input == registers.end() || output == registers.end() || task.rank() < 0 ||
        task.rank() >= size) {
      continue;  // the runtime's plan validation names what is wrong
    }
    CollectiveRanks& ranks =
        collectives[{task.collective().communicator(), task.collective().sequence()}];
    ranks.conf = &task.collective();
    ranks.data_type = output->second->tensor().data_type();
    ranks.inputs.resize(size);
    ranks.inputs[task.rank()] = Shape::FromProto(input->second->tensor());
  }
}

// The staging buffers the ranks of `collectives` hold, on their devices.
void AddStaging(const NetworkCollectiveRanks& collectives,
                const StagingCommunicators& communicators,
                const absl::flat_hash_map<DeviceKey, int>& position,
                std::vector<DeviceHoldings>& holdings) {
  // The runtime keeps one buffer per slot of each (communicator, rank), as large as the largest
  // of the communicator's collectives needs.
  std::map<std::pair<std::string, int>, std::vector<int64_t>> slots;
  for (const auto& [key, ranks] : collectives) {
    std::vector<Shape> inputs;
    for (const std::optional<Shape>& input : ranks.inputs) {
      if (!input.has_value()) break;  // a rank of a node whose plan is not given
      inputs.push_back(*input);
    }
    if (inputs.size() != ranks.inputs.size()) continue;
    for (int rank = 0; rank < static_cast<int>(inputs.size()); ++rank) {
      absl::StatusOr<std::vector<int64_t>> bytes =
          CollectiveStagingBytes(*ranks.conf, inputs, rank, ranks.data_type);
      if (!bytes.ok()) continue;  // shapes that do not fit: the runtime's header check names them
      std::vector<int64_t>& largest = slots[{key.first, rank}];
      largest.resize(bytes->size(), 0);
      for (size_t slot = 0; slot < bytes->size(); ++slot) {
        largest[slot] = std::max(largest[slot], (*bytes)[slot]);
      }
    }
  }
  for (const auto& [key, sizes] : slots) {
    const plan::Device& device = communicators.at(key.first)->devices(key.second);
    auto found = position.find(DeviceKey::Of(device));
    if (found == position.end()) continue;
    int64_t bytes = 0;
    for (int64_t size : sizes) {
      if (size > 0) bytes = SaturatedAdd(bytes, BufferBytes(size, device));
    }
    if (bytes == 0) continue;
    DeviceHoldings& holder = holdings[found->second];
    holder.estimate.staging_bytes = SaturatedAdd(holder.estimate.staging_bytes, bytes);
    holder.estimate.parts.communication = SaturatedAdd(holder.estimate.parts.communication, bytes);
    int64_t& of_communicator = holder.staging[key.first];
    of_communicator = SaturatedAdd(of_communicator, bytes);
  }
}

// Every device's holdings, in the order of the plans' devices; the registers of device
// `named_device` (a position in that order) by name. The plans are read on up to `threads`
// threads when no device is in two of them: each plan's tasks then add to its own devices only,
// as in the node split's plans.
std::vector<DeviceHoldings> Holdings(absl::Span<const plan::Plan> node_plans, int threads,
                                     int named_device = -1) {
  std::vector<DeviceHoldings> holdings;
  absl::flat_hash_map<DeviceKey, int> position;
  for (const plan::Plan& plan : node_plans) {
    for (const plan::DeviceDesc& desc : plan.devices()) {
      if (!position.emplace(DeviceKey::Of(desc.device()), static_cast<int>(holdings.size()))
               .second) {
        threads = 1;
        continue;
      }
      DeviceHoldings& added = holdings.emplace_back();
      added.estimate.device = desc.device();
      added.estimate.budget_bytes = desc.memory_budget_bytes();
    }
  }
  const StagingCommunicators communicators = NetworkCommunicators(node_plans);
  std::vector<NetworkCollectiveRanks> collectives_of_plan(node_plans.size());
  ParallelFor(static_cast<int>(node_plans.size()), threads, [&](int index) {
    const plan::Plan& plan = node_plans[index];
    const RegisterIndex registers = IndexRegisters(plan);
    AddTaskBuffers(plan, registers, position, named_device, holdings);
    AddCollectiveInputs(plan, registers, communicators, collectives_of_plan[index]);
  });
  NetworkCollectiveRanks collectives;
  for (NetworkCollectiveRanks& of_plan : collectives_of_plan) {
    for (auto& [key, ranks] : of_plan) {
      CollectiveRanks& merged = collectives[key];
      merged.conf = ranks.conf;
      merged.data_type = ranks.data_type;
      merged.inputs.resize(ranks.inputs.size());
      for (size_t rank = 0; rank < ranks.inputs.size(); ++rank) {
        if (ranks.inputs[rank].has_value()) merged.inputs[rank] = std::move(ranks.inputs[rank]);
      }
    }
  }
  AddStaging(collectives, communicators, position, holdings);
  return holdings;
}

std::string Largest(std::vector<std::pair<int64_t, std::string>> holders, size_t count) {
  std::sort(holders.begin(), holders.end(), std::greater<>());
  std::string names;
  for (size_t i = 0; i < holders.size() && i < count; ++i) {
    absl::StrAppend(&names, i == 0 ? "" : ", ", holders[i].second, " (",
                    FormatBytes(holders[i].first), ")");
  }
  return names;
}

}  // namespace

std::string DescribeMemoryParts(const MemoryParts& parts) {
  std::vector<std::string> described;
  auto add = [&](const char* what, int64_t bytes) {
    if (bytes > 0) described.push_back(absl::StrCat(what, " ", FormatBytes(bytes)));
  };
  add("parameters", parts.parameters);
  add("gradients", parts.gradients);
  add("optimizer states", parts.optimizer_states);
  add("gradient accumulators", parts.accumulators);
  add("activations", parts.activations);
  add("communication buffers", parts.communication);
  if (parts.pools > 0) {
    std::vector<std::string> apart;
    if (parts.pooled_activations > 0) {
      apart.push_back(absl::StrCat("activations ", FormatBytes(parts.pooled_activations)));
    }
    if (parts.pooled_gradients > 0) {
      apart.push_back(absl::StrCat("gradients ", FormatBytes(parts.pooled_gradients)));
    }
    if (parts.pooled_communication > 0) {
      apart.push_back(
          absl::StrCat("communication buffers ", FormatBytes(parts.pooled_communication)));
    }
    described.push_back(absl::StrCat("memory pools ", FormatBytes(parts.pools), " (holding ",
                                     absl::StrJoin(apart, ", "), " apart)"));
  }
  if (parts.offloaded > 0) {
    described.push_back(
        absl::StrCat("activations offloaded to host memory ", FormatBytes(parts.offloaded)));
  }
  return described.empty() ? "nothing" : absl::StrJoin(described, ", ");
}

std::vector<DeviceMemoryEstimate> EstimateMemory(absl::Span<const plan::Plan> node_plans,
                                                 int threads) {
  std::vector<DeviceMemoryEstimate> estimates;
  for (DeviceHoldings& holdings : Holdings(node_plans, threads)) {
    estimates.push_back(std::move(holdings.estimate));
  }
  return estimates;
}

namespace {

// The check of the nodes' host memory (offloaded activations) against their plans' budgets.
absl::Status CheckHostMemory(absl::Span<const plan::Plan> node_plans,
                             const std::vector<DeviceHoldings>& all) {
  absl::flat_hash_map<int, int64_t> budget_of_node;
  for (const plan::Plan& plan : node_plans) {
    budget_of_node[plan.node()] = plan.host_memory_budget_bytes();
  }
  std::map<int, std::pair<int64_t, std::vector<std::pair<int64_t, std::string>>>> used_by_node;
  for (const DeviceHoldings& holdings : all) {
    if (holdings.estimate.parts.offloaded == 0) continue;
    auto& [bytes, devices] = used_by_node[holdings.estimate.device.node()];
    bytes = SaturatedAdd(bytes, holdings.estimate.parts.offloaded);
    devices.emplace_back(holdings.estimate.parts.offloaded, DeviceName(holdings.estimate.device));
  }
  for (const auto& [node, used] : used_by_node) {
    const int64_t budget = budget_of_node.contains(node) ? budget_of_node.at(node)
                           : node_plans.empty()          ? 0
                                                         : node_plans[0].host_memory_budget_bytes();
    const bool beyond_any = used.first > kMaxDeviceMemoryBytes;
    if (!beyond_any && (budget <= 0 || used.first <= budget)) continue;
    return absl::ResourceExhaustedError(absl::StrCat(
        "node ", node, "'s host memory needs ", FormatBytes(used.first),
        " for offloaded activations (most: ", Largest(used.second, 3), ") but ",
        beyond_any ? "no node may be asked for more than 2^56 bytes"
                   : absl::StrCat("its budget is ", FormatBytes(budget),
                                  " (the least of the nodes' --host-memory-budget and the job's "
                                  "host_memory_budget_bytes)"),
        ". Offload fewer activations (Op.offload: OP_OFFLOAD_NEVER), recompute them, or raise "
        "the budget."));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckMemory(absl::Span<const plan::Plan> node_plans, int threads) {
  const std::vector<DeviceHoldings> all = Holdings(node_plans, threads);
  if (absl::Status status = CheckHostMemory(node_plans, all); !status.ok()) return status;
  for (size_t device = 0; device < all.size(); ++device) {
    const DeviceMemoryEstimate& estimate = all[device].estimate;
    const bool beyond_any_device = estimate.total_bytes() > kMaxDeviceMemoryBytes;
    if (!beyond_any_device &&
        (estimate.budget_bytes == 0 || estimate.total_bytes() <= estimate.budget_bytes)) {
      continue;
    }
    // Once more, naming this device's registers (not kept for every device of a large job).
    const DeviceHoldings holdings =
        std::move(Holdings(node_plans, threads, static_cast<int>(device))[device]);
    std::string needs = absl::StrCat(FormatBytes(estimate.register_bytes), " for its registers");
    std::string holders = absl::StrCat("largest registers: ", Largest(holdings.registers, 3));
    if (estimate.state_bytes > 0 || estimate.staging_bytes > 0) {
      needs = absl::StrCat(FormatBytes(estimate.total_bytes()), " (", needs);
      if (estimate.state_bytes > 0) {
        absl::StrAppend(&needs, ", ", FormatBytes(estimate.state_bytes),
                        " for its optimizer states and accumulators");
      }
      if (estimate.staging_bytes > 0) {
        absl::StrAppend(&needs, ", ", FormatBytes(estimate.staging_bytes),
                        " for the staging buffers of its network collectives");
        std::vector<std::pair<int64_t, std::string>> staging;
        for (const auto& [communicator, bytes] : holdings.staging) {
          staging.emplace_back(bytes, absl::StrCat("'", communicator, "'"));
        }
        absl::StrAppend(&holders, "; most staging: communicator ", Largest(staging, 1));
      }
      absl::StrAppend(&needs, ")");
    }
    absl::StrAppend(&holders, "; by what it holds: ", DescribeMemoryParts(estimate.parts));
    if (beyond_any_device) {
      return absl::ResourceExhaustedError(
          absl::StrCat("device ", DeviceName(estimate.device), " needs ", needs,
                       ", more than the 2^56 bytes (64 PiB) any device may be asked to hold; ",
                       holders, ". Check the job's shapes."));
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", DeviceName(estimate.device), " needs ", needs,
                     " but its budget is ", FormatBytes(estimate.budget_bytes), "; ", holders,
                     ". Use more devices, fewer register slots, or a larger budget."));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
