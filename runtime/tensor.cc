#include "runtime/tensor.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "runtime/data_type.h"

namespace loom {

int64_t Shape::NumElements() const {
  int64_t count = 1;
  for (int64_t dimension : dimensions_) count *= dimension;
  return count;
}

std::string Shape::ToString() const { return absl::StrCat("[", absl::StrJoin(dimensions_, ", "), "]"); }

int64_t TensorView::ByteSize() const { return NumElements() * DataTypeSize(data_type); }

}  // namespace loom
