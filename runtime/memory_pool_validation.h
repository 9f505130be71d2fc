#ifndef LOOM_RUNTIME_MEMORY_POOL_VALIDATION_H_
#define LOOM_RUNTIME_MEMORY_POOL_VALIDATION_H_

// ValidatePlan's checks of memory pools (Plan.memory_pools) and of the registers placed in them
// (RegisterDesc.pool, pool_offset). Each error is INVALID_ARGUMENT naming the pool, and for a
// placement the register too.

#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "core/device_key.h"
#include "proto/plan.pb.h"

namespace loom {

// Every pool has a name no other pool has, lies on one of `devices` (the plan's), and holds 1 to
// kMaxTensorBytes bytes. Fills `pool_position`: pool name -> its position in the plan.
absl::Status CheckMemoryPools(const plan::Plan& plan, const absl::flat_hash_set<DeviceKey>& devices,
                              absl::flat_hash_map<std::string, int>* pool_position);

// Where register `reg` (whose tensor CheckRegisters accepted, written by `producer`) lies: without
// a pool, at offset 0; with one, the pool exists, the register has exactly 1 slot, at a
// non-negative offset that is a multiple of 64, ending within the pool's bytes, and the pool is
// on the producer's device (registers live there).
absl::Status CheckPoolPlacement(const plan::RegisterDesc& reg, const plan::Task& producer,
                                const plan::Plan& plan,
                                const absl::flat_hash_map<std::string, int>& pool_position);

}  // namespace loom

#endif  // LOOM_RUNTIME_MEMORY_POOL_VALIDATION_H_
