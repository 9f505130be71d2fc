#ifndef LOOM_RUNTIME_REGISTER_H_
#define LOOM_RUNTIME_REGISTER_H_

// Register: a register's description (name, shape, data type, producer and consumers) and its slot
// buffers, allocated from the producer's device memory or, for a register placed in a memory pool
// (RegisterDesc.pool), its one slot inside the pool's buffer. JobRuntime builds one per register
// of the plan; actors use its slots as READY and FREE messages allow.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/actor_id.h"
#include "runtime/device_memory.h"

namespace loom {

// A register's description and its slot buffers. Immutable once built: the producer and the
// consumers read it from their own threads; who may touch which slot is decided by messages.
class Register {
 public:
  // Allocates `desc.num_slots()` buffers from `memory` (the producer's device).
  static absl::StatusOr<std::unique_ptr<Register>> Create(const plan::RegisterDesc& desc,
                                                          uint32_t index, DeviceMemory* memory);
  // A register whose one slot is `slot`, memory it does not own (a memory pool's buffer at the
  // register's pool_offset, which outlives the register). `desc.num_slots()` must be 1.
  static absl::StatusOr<std::unique_ptr<Register>> CreateInPool(const plan::RegisterDesc& desc,
                                                                uint32_t index, void* slot);
  ~Register();

  Register(const Register&) = delete;
  Register& operator=(const Register&) = delete;

  const std::string& name() const { return name_; }
  uint32_t index() const { return index_; }
  int num_slots() const { return static_cast<int>(slots_.size()); }
  const Shape& shape() const { return shape_; }
  plan::DataType data_type() const { return data_type_; }
  int64_t slot_bytes() const { return slot_bytes_; }

  TensorView SlotView(int slot) const { return TensorView{slots_[slot], data_type_, shape_}; }

  ActorId producer() const { return producer_; }
  const std::vector<ActorId>& consumers() const { return consumers_; }
  // Whether its slot lies in a memory pool (then it frees nothing).
  bool in_pool() const { return memory_ == nullptr; }
  void set_producer(ActorId producer) { producer_ = producer; }
  void add_consumer(ActorId consumer) { consumers_.push_back(consumer); }

 private:
  Register() = default;
  // What both factories share: the description, without slots.
  static std::unique_ptr<Register> Describe(const plan::RegisterDesc& desc, uint32_t index);

  std::string name_;
  uint32_t index_ = 0;
  Shape shape_;
  plan::DataType data_type_ = plan::DATA_TYPE_UNSPECIFIED;
  int64_t slot_bytes_ = 0;
  std::vector<void*> slots_;
  // Where its slots came from; null for a register in a memory pool (the pool owns its slot).
  DeviceMemory* memory_ = nullptr;
  ActorId producer_;
  std::vector<ActorId> consumers_;
};

}  // namespace loom

#endif  // LOOM_RUNTIME_REGISTER_H_
