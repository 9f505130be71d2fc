#include "runtime/plan_text.h"

#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "core/file_contents.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace loom {
namespace {

class CollectingErrors final : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, google::protobuf::io::ColumnNumber column,
                const std::string& message) override {
    if (!errors.empty()) errors += "; ";
    absl::StrAppend(&errors, "line ", line + 1, ", column ", column + 1, ": ", message);
  }
  std::string errors;
};

}  // namespace

absl::StatusOr<plan::Plan> ParsePlanText(const std::string& text, const std::string& source_name) {
  plan::Plan plan;
  google::protobuf::TextFormat::Parser parser;
  CollectingErrors errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(text, &plan)) {
    return absl::InvalidArgumentError(
        absl::StrCat(source_name, " is not a valid plan: ", errors.errors));
  }
  return plan;
}

absl::StatusOr<plan::Plan> ReadPlanFile(const std::string& path) {
  absl::StatusOr<std::string> contents = ReadFileContents(path);
  if (!contents.ok()) return contents.status();
  if (absl::EndsWith(path, ".pb")) {
    plan::Plan plan;
    if (!plan.ParseFromString(*contents)) {
      return absl::InvalidArgumentError(absl::StrCat(path, " is not a binary plan"));
    }
    return plan;
  }
  return ParsePlanText(*contents, path);
}

absl::Status WritePlanFile(const plan::Plan& plan, const std::string& path) {
  std::string text;
  if (absl::EndsWith(path, ".pb")) {
    text = plan.SerializeAsString();
  } else if (!google::protobuf::TextFormat::PrintToString(plan, &text)) {
    return absl::InternalError("cannot print the plan as text");
  }
  std::ofstream file(path, std::ios::binary);
  file << text;
  if (!file) return absl::UnavailableError(absl::StrCat("cannot write '", path, "'"));
  return absl::OkStatus();
}

}  // namespace loom
