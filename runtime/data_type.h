#ifndef LOOM_RUNTIME_DATA_TYPE_H_
#define LOOM_RUNTIME_DATA_TYPE_H_

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

#endif  // LOOM_RUNTIME_DATA_TYPE_H_
