#include "core/data_type.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {

int64_t DataTypeSize(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
    case plan::INT32:
      return 4;
    case plan::INT64:
      return 8;
    case plan::UINT8:
      return 1;
    case plan::UINT16:
    case plan::BFLOAT16:
      return 2;
    default:
      return 0;
  }
}

std::string DataTypeName(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
      return "float32";
    case plan::INT32:
      return "int32";
    case plan::INT64:
      return "int64";
    case plan::UINT8:
      return "uint8";
    case plan::UINT16:
      return "uint16";
    case plan::BFLOAT16:
      return "bfloat16";
    default:
      return "unspecified";
  }
}

absl::StatusOr<plan::DataType> ParseDataType(const std::string& name) {
  for (plan::DataType type :
       {plan::FLOAT32, plan::INT32, plan::INT64, plan::UINT8, plan::UINT16, plan::BFLOAT16}) {
    if (DataTypeName(type) == name) return type;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown data type '", name,
                   "' (expected float32, int32, int64, uint8, uint16 or bfloat16)"));
}

}  // namespace loom
