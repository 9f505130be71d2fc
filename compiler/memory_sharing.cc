#include "compiler/memory_sharing.h"

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "compiler/register_lifetimes.h"
#include "core/device_name.h"
#include "core/host_buffer_layout.h"

namespace loom::compiler {
namespace {

constexpr int64_t kAlignment = 64;

int64_t Aligned(int64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// The offsets of one group's registers (by position), and the pool's size.
struct Placement {
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
};

Placement Place(const RegisterLifetimes& lifetimes, int group_index) {
  const SharingGroup& group = lifetimes.groups()[group_index];
  const int count = static_cast<int>(group.registers.size());
  std::vector<int> order(count);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return group.slot_bytes[a] > group.slot_bytes[b]; });
  Placement placement;
  placement.offsets.assign(count, -1);
  std::vector<int> placed;
  std::vector<std::pair<int64_t, int64_t>> taken;  // [begin, end) of placed registers it meets
  for (int next : order) {
    taken.clear();
    for (int other : placed) {
      if (lifetimes.Disjoint(group_index, next, other)) continue;
      taken.emplace_back(placement.offsets[other],
                         placement.offsets[other] + Aligned(group.slot_bytes[other]));
    }
    std::sort(taken.begin(), taken.end());
    const int64_t size = Aligned(group.slot_bytes[next]);
    int64_t offset = 0;
    for (const auto& [begin, end] : taken) {
      if (begin >= offset + size) break;  // it fits in the gap before
      offset = std::max(offset, end);
    }
    placement.offsets[next] = offset;
    placement.bytes = std::max(placement.bytes, offset + size);
    placed.push_back(next);
  }
  return placement;
}

}  // namespace

void ShareRegisterMemory(std::vector<plan::Plan>& node_plans, int threads) {
  // Without a variable's loop-carried gradient (inference, forward-only jobs) nothing orders a
  // step's registers before the next step's, and but for rare credit chains none is provably
  // apart: not worth analyzing (a plan of 1.5 million tasks would take seconds).
  const bool trains = std::any_of(node_plans.begin(), node_plans.end(), [](const plan::Plan& plan) {
    return std::any_of(plan.tasks().begin(), plan.tasks().end(), [](const plan::Task& task) {
      return task.kind() == plan::VARIABLE && task.inputs_size() > 0;
    });
  });
  if (!trains) return;
  const RegisterLifetimes lifetimes = RegisterLifetimes::Analyze(node_plans, threads);
  // Decided on the plans as they are, written after: the analysis points into them.
  struct Pool {
    int plan = 0;
    plan::MemoryPool pool;
    std::vector<std::pair<int, int64_t>> registers;  // (position, offset)
  };
  std::vector<Pool> pools;
  for (int g = 0; g < static_cast<int>(lifetimes.groups().size()); ++g) {
    const SharingGroup& group = lifetimes.groups()[g];
    if (group.registers.size() < 2) continue;
    const Placement placement = Place(lifetimes, g);
    int64_t apart = 0;
    for (int64_t bytes : group.slot_bytes) apart += LayOutHostBuffer(bytes).footprint_bytes;
    if (LayOutHostBuffer(placement.bytes).footprint_bytes >= apart) continue;  // nothing gained
    Pool& pool = pools.emplace_back();
    pool.plan = group.plan;
    pool.pool.set_name(absl::StrCat("pool:", StreamName(group.stream)));
    *pool.pool.mutable_device() = group.stream.device();
    pool.pool.set_bytes(placement.bytes);
    pool.pool.set_unshared_bytes(apart);
    pool.pool.set_num_registers(static_cast<int32_t>(group.registers.size()));
    for (size_t r = 0; r < group.registers.size(); ++r) {
      pool.registers.emplace_back(group.registers[r].reg, placement.offsets[r]);
    }
  }
  for (Pool& pool : pools) {
    plan::Plan& plan = node_plans[pool.plan];
    for (const auto& [position, offset] : pool.registers) {
      plan::RegisterDesc& reg = *plan.mutable_registers(position);
      reg.set_pool(pool.pool.name());
      reg.set_pool_offset(offset);
    }
    *plan.add_memory_pools() = std::move(pool.pool);
  }
}

void CopyRegisterPlacement(absl::Span<const plan::Plan> node_plans, plan::Plan& whole_plan) {
  absl::flat_hash_map<std::string, const plan::RegisterDesc*> placed;
  for (const plan::Plan& plan : node_plans) {
    for (const plan::MemoryPool& pool : plan.memory_pools()) *whole_plan.add_memory_pools() = pool;
    for (const plan::RegisterDesc& reg : plan.registers()) {
      if (!reg.pool().empty()) placed.emplace(reg.name(), &reg);
    }
  }
  if (placed.empty()) return;
  for (plan::RegisterDesc& reg : *whole_plan.mutable_registers()) {
    auto found = placed.find(reg.name());
    if (found == placed.end()) continue;
    reg.set_pool(found->second->pool());
    reg.set_pool_offset(found->second->pool_offset());
  }
}

}  // namespace loom::compiler
