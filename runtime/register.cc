#include "runtime/register.h"

#include "absl/strings/str_cat.h"
#include "core/data_type.h"

namespace loom {

absl::StatusOr<std::unique_ptr<Register>> Register::Create(const plan::RegisterDesc& desc,
                                                           uint32_t index, DeviceMemory* memory) {
  std::unique_ptr<Register> result(new Register());
  result->name_ = desc.name();
  result->index_ = index;
  result->shape_ = Shape::FromProto(desc.tensor());
  result->data_type_ = desc.tensor().data_type();
  result->slot_bytes_ = result->shape_.NumElements() * DataTypeSize(result->data_type_);
  result->memory_ = memory;
  for (int slot = 0; slot < desc.num_slots(); ++slot) {
    absl::StatusOr<void*> buffer = memory->Allocate(
        result->slot_bytes_, absl::StrCat("register '", desc.name(), "' slot ", slot));
    if (!buffer.ok()) return buffer.status();
    result->slots_.push_back(*buffer);
  }
  return result;
}

Register::~Register() {
  for (void* slot : slots_) memory_->Free(slot);
}

}  // namespace loom
