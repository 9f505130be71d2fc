#include "core/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom {

int64_t Shape::NumElements() const {
  int64_t count = 1;
  for (int64_t dimension : dimensions_) count *= dimension;
  return count;
}

int64_t Shape::ElementsBefore(int axis) const {
  int64_t count = 1;
  for (int i = 0; i < axis; ++i) count *= dimensions_[i];
  return count;
}

int64_t Shape::ElementsAfter(int axis) const {
  int64_t count = 1;
  for (int i = axis + 1; i < rank(); ++i) count *= dimensions_[i];
  return count;
}

std::string Shape::ToString() const {
  return absl::StrCat("[", absl::StrJoin(dimensions_, ", "), "]");
}

int64_t TensorView::ByteSize() const { return NumElements() * DataTypeSize(data_type); }

}  // namespace loom
