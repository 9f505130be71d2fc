#ifndef LOOM_RUNTIME_PLAN_TEXT_H_
#define LOOM_RUNTIME_PLAN_TEXT_H_

// Reading and writing plan files: ParsePlanText parses a plan in protobuf text format, ReadPlanFile
// reads a .pbtxt (or binary .pb) file, and WritePlanFile writes either, by the path's extension.
// Used by `loomctl compile` and `loomctl run-plan`.

#include <string>

#include "absl/status/statusor.h"
#include "proto/plan.pb.h"

namespace loom {

// Parses a plan in protobuf text format. Errors give the line and column.
absl::StatusOr<plan::Plan> ParsePlanText(const std::string& text, const std::string& source_name);
// Reads a .pbtxt plan file (or a binary .pb one).
absl::StatusOr<plan::Plan> ReadPlanFile(const std::string& path);
absl::Status WritePlanFile(const plan::Plan& plan, const std::string& path);

}  // namespace loom

#endif  // LOOM_RUNTIME_PLAN_TEXT_H_
