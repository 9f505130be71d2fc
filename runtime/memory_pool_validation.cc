#include "runtime/memory_pool_validation.h"

#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/checked_arithmetic.h"
#include "core/device_name.h"
#include "core/tensor.h"

namespace loom {
namespace {

absl::Status Invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status CheckMemoryPools(const plan::Plan& plan, const absl::flat_hash_set<DeviceKey>& devices,
                              absl::flat_hash_map<std::string, int>* pool_position) {
  for (int i = 0; i < plan.memory_pools_size(); ++i) {
    const plan::MemoryPool& pool = plan.memory_pools(i);
    if (pool.name().empty()) return Invalid(absl::StrCat("memory pool #", i, " has no name"));
    const std::string name = absl::StrCat("memory pool '", pool.name(), "'");
    if (!pool_position->emplace(pool.name(), i).second) {
      return Invalid(absl::StrCat(name, " is declared twice"));
    }
    if (!devices.contains(DeviceKey::Of(pool.device()))) {
      return Invalid(absl::StrCat(name, " is on device ", DeviceName(pool.device()),
                                  ", which is not among the plan's devices"));
    }
    if (pool.bytes() <= 0 || pool.bytes() > kMaxTensorBytes) {
      return Invalid(absl::StrCat(name, " has ", pool.bytes(), " bytes: a pool holds 1 to ",
                                  kMaxTensorBytes, " bytes"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckPoolPlacement(const plan::RegisterDesc& reg, const plan::Task& producer,
                                const plan::Plan& plan,
                                const absl::flat_hash_map<std::string, int>& pool_position) {
  if (reg.pool().empty()) {
    if (reg.pool_offset() != 0) {
      return Invalid(absl::StrCat("register '", reg.name(), "' has pool_offset ", reg.pool_offset(),
                                  " but names no memory pool"));
    }
    return absl::OkStatus();
  }
  const std::string who =
      absl::StrCat("register '", reg.name(), "' in memory pool '", reg.pool(), "'");
  auto found = pool_position.find(reg.pool());
  if (found == pool_position.end()) {
    return Invalid(absl::StrCat(who, ": the plan has no such pool"));
  }
  const plan::MemoryPool& pool = plan.memory_pools(found->second);
  if (reg.num_slots() != 1) {
    return Invalid(
        absl::StrCat(who, " has ", reg.num_slots(), " slots: a register in a pool has exactly 1"));
  }
  if (reg.pool_offset() < 0 || reg.pool_offset() % 64 != 0) {
    return Invalid(absl::StrCat(who, " is at offset ", reg.pool_offset(),
                                ": an offset is a non-negative multiple of 64"));
  }
  // CheckRegisters accepted the register's tensor: its bytes are known to be within the limits.
  const int64_t slot_bytes =
      CheckedTensorBytes(reg.tensor().shape(), reg.tensor().data_type()).value_or(0);
  const std::optional<int64_t> end = CheckedAdd(reg.pool_offset(), slot_bytes);
  if (!end.has_value() || *end > pool.bytes()) {
    return Invalid(absl::StrCat(who, ": its slot of ", slot_bytes, " bytes at offset ",
                                reg.pool_offset(), " ends beyond the pool's ", pool.bytes(),
                                " bytes"));
  }
  const plan::Device& device = producer.stream().device();
  if (!SameDevice(pool.device(), device)) {
    return Invalid(absl::StrCat(who, ": the pool is on ", DeviceName(pool.device()),
                                " but the register lives on ", DeviceName(device),
                                ", the device of its producer '", producer.name(), "'"));
  }
  return absl::OkStatus();
}

}  // namespace loom
