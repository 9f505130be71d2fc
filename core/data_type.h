#ifndef LOOM_CORE_DATA_TYPE_H_
#define LOOM_CORE_DATA_TYPE_H_

// Loom's element types (plan::DataType) as users and messages see them: DataTypeSize (bytes per
// element), DataTypeName ("float32", "bfloat16", ...) and ParseDataType, its inverse, which
// refuses an unknown name with INVALID_ARGUMENT listing the six types.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"

namespace loom {

// Bytes per element; 0 for DATA_TYPE_UNSPECIFIED.
int64_t DataTypeSize(plan::DataType data_type);

// "float32", "int64", ... as users write them.
std::string DataTypeName(plan::DataType data_type);

absl::StatusOr<plan::DataType> ParseDataType(const std::string& name);

}  // namespace loom

#endif  // LOOM_CORE_DATA_TYPE_H_
