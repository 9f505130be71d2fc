#include "runtime/register.h"

#include "absl/strings/str_cat.h"
#include "core/data_type.h"

namespace loom {

std::unique_ptr<Register> Register::Describe(const plan::RegisterDesc& desc, uint32_t index) {
  std::unique_ptr<Register> result(new Register());
  result->name_ = desc.name();
  result->index_ = index;
  result->shape_ = Shape::FromProto(desc.tensor());
  result->data_type_ = desc.tensor().data_type();
  result->slot_bytes_ = result->shape_.NumElements() * DataTypeSize(result->data_type_);
  return result;
}

absl::StatusOr<std::unique_ptr<Register>> Register::Create(const plan::RegisterDesc& desc,
                                                           uint32_t index, DeviceMemory* memory) {
  std::unique_ptr<Register> result = Describe(desc, index);
  result->memory_ = memory;
  for (int slot = 0; slot < desc.num_slots(); ++slot) {
    absl::StatusOr<void*> buffer = memory->Allocate(
        result->slot_bytes_, absl::StrCat("register '", desc.name(), "' slot ", slot));
    if (!buffer.ok()) return buffer.status();
    result->slots_.push_back(*buffer);
  }
  return result;
}

absl::StatusOr<std::unique_ptr<Register>> Register::CreateInPool(const plan::RegisterDesc& desc,
                                                                 uint32_t index, void* slot) {
  if (desc.num_slots() != 1 || slot == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("register '", desc.name(), "' in memory pool '",
                                                   desc.pool(), "' has ", desc.num_slots(),
                                                   " slots: a register in a pool has exactly 1"));
  }
  std::unique_ptr<Register> result = Describe(desc, index);
  result->slots_.push_back(slot);
  return result;
}

Register::~Register() {
  if (memory_ == nullptr) return;
  for (void* slot : slots_) memory_->Free(slot);
}

}  // namespace loom
