#include "compiler/memory_plan.h"

#include <algorithm>
#include <tuple>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "runtime/data_type.h"
#include "runtime/device_name.h"
#include "runtime/format_bytes.h"
#include "runtime/host_buffer_layout.h"
#include "runtime/tensor.h"

namespace loom::compiler {
namespace {

// Every slot of `reg` on `device`: a CPU device's slots take what the runtime's host allocator
// lays out (huge pages from 1 MiB: runtime/host_buffer_layout.h). For the host devices of a GPU
// job, whose pinned buffers take their bytes, this is an upper bound.
int64_t RegisterBytes(const plan::RegisterDesc& reg, const plan::Device& device) {
  int64_t slot_bytes =
      Shape(reg.tensor().shape()).NumElements() * DataTypeSize(reg.tensor().data_type());
  if (device.type() == plan::CPU) slot_bytes = LayOutHostBuffer(slot_bytes).footprint_bytes;
  return slot_bytes * reg.num_slots();
}

using DeviceKey = std::tuple<int, int, int>;

DeviceKey KeyOf(const plan::Device& device) {
  return {device.node(), static_cast<int>(device.type()), device.index()};
}

// For every register (in plan order), the position in plan.devices() of its producer's device;
// -1 when no task produces it.
std::vector<int> ProducerDevicePositions(const plan::Plan& plan) {
  absl::flat_hash_map<DeviceKey, int> position;
  for (int i = 0; i < plan.devices_size(); ++i) position[KeyOf(plan.devices(i).device())] = i;
  absl::flat_hash_map<absl::string_view, int> device_of_register;
  device_of_register.reserve(plan.registers_size());
  for (const plan::Task& task : plan.tasks()) {
    auto found = position.find(KeyOf(task.stream().device()));
    if (found == position.end()) continue;
    for (const std::string& output : task.outputs()) device_of_register[output] = found->second;
  }
  std::vector<int> result(plan.registers_size(), -1);
  for (int r = 0; r < plan.registers_size(); ++r) {
    auto found = device_of_register.find(plan.registers(r).name());
    if (found != device_of_register.end()) result[r] = found->second;
  }
  return result;
}

std::vector<DeviceMemoryEstimate> Estimate(const plan::Plan& plan,
                                           const std::vector<int>& producer_device) {
  std::vector<DeviceMemoryEstimate> estimates;
  for (const plan::DeviceDesc& desc : plan.devices()) {
    estimates.push_back(DeviceMemoryEstimate{desc.device(), 0, desc.memory_budget_bytes()});
  }
  for (int r = 0; r < plan.registers_size(); ++r) {
    if (producer_device[r] >= 0) {
      DeviceMemoryEstimate& estimate = estimates[producer_device[r]];
      estimate.register_bytes += RegisterBytes(plan.registers(r), estimate.device);
    }
  }
  return estimates;
}

}  // namespace

std::vector<DeviceMemoryEstimate> EstimateMemory(const plan::Plan& plan) {
  return Estimate(plan, ProducerDevicePositions(plan));
}

absl::Status CheckMemory(const plan::Plan& plan) {
  const std::vector<int> producer_device = ProducerDevicePositions(plan);
  const std::vector<DeviceMemoryEstimate> estimates = Estimate(plan, producer_device);
  for (size_t device = 0; device < estimates.size(); ++device) {
    const DeviceMemoryEstimate& estimate = estimates[device];
    if (estimate.budget_bytes == 0 || estimate.register_bytes <= estimate.budget_bytes) continue;
    std::vector<std::pair<int64_t, std::string>> largest;
    for (int r = 0; r < plan.registers_size(); ++r) {
      if (producer_device[r] != static_cast<int>(device)) continue;
      largest.emplace_back(RegisterBytes(plan.registers(r), estimate.device),
                           plan.registers(r).name());
    }
    std::sort(largest.begin(), largest.end(), std::greater<>());
    std::string names;
    for (size_t i = 0; i < largest.size() && i < 3; ++i) {
      absl::StrAppend(&names, i == 0 ? "" : ", ", "'", largest[i].second, "' (",
                      FormatBytes(largest[i].first), ")");
    }
    return absl::ResourceExhaustedError(
        absl::StrCat("device ", DeviceName(estimate.device), " needs ",
                     FormatBytes(estimate.register_bytes), " for its registers but its budget is ",
                     FormatBytes(estimate.budget_bytes), "; largest registers: ", names,
                     ". Use more devices, fewer register slots, or a larger budget."));
  }
  return absl::OkStatus();
}

}  // namespace loom::compiler
