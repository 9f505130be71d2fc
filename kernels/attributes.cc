#include "kernels/attributes.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace {

absl::Status Missing(const std::string& name) {
  return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
}

absl::Status WrongType(const std::string& name, const char* expected) {
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be ", expected));
}

}  // namespace

absl::StatusOr<int64_t> Attributes::GetInt(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (!iterator->second.has_int_value()) return WrongType(name, "an integer (int_value)");
  return iterator->second.int_value();
}

absl::StatusOr<int64_t> Attributes::GetInt(const std::string& name, int64_t default_value) const {
  if (!Has(name)) return default_value;
  return GetInt(name);
}

absl::StatusOr<double> Attributes::GetFloat(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (iterator->second.has_float_value()) return iterator->second.float_value();
  if (iterator->second.has_int_value()) return static_cast<double>(iterator->second.int_value());
  return WrongType(name, "a number (float_value)");
}

absl::StatusOr<double> Attributes::GetFloat(const std::string& name, double default_value) const {
  if (!Has(name)) return default_value;
  return GetFloat(name);
}

absl::StatusOr<bool> Attributes::GetBool(const std::string& name, bool default_value) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return default_value;
  if (!iterator->second.has_bool_value()) return WrongType(name, "a boolean (bool_value)");
  return iterator->second.bool_value();
}

absl::StatusOr<std::string> Attributes::GetString(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (!iterator->second.has_string_value()) return WrongType(name, "a string (string_value)");
  return iterator->second.string_value();
}

absl::StatusOr<std::string> Attributes::GetString(const std::string& name,
                                                  const std::string& default_value) const {
  if (!Has(name)) return default_value;
  return GetString(name);
}

absl::StatusOr<std::vector<int64_t>> Attributes::GetIntList(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (!iterator->second.has_int_list()) return WrongType(name, "a list of integers (int_list)");
  const auto& values = iterator->second.int_list().values();
  return std::vector<int64_t>(values.begin(), values.end());
}

absl::StatusOr<std::vector<double>> Attributes::GetFloatList(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (!iterator->second.has_float_list()) return WrongType(name, "a list of floats (float_list)");
  const auto& values = iterator->second.float_list().values();
  return std::vector<double>(values.begin(), values.end());
}

absl::StatusOr<std::vector<std::string>> Attributes::GetStringList(const std::string& name) const {
  auto iterator = conf_.attributes().find(name);
  if (iterator == conf_.attributes().end()) return Missing(name);
  if (!iterator->second.has_string_list()) {
    return WrongType(name, "a list of strings (string_list)");
  }
  const auto& values = iterator->second.string_list().values();
  return std::vector<std::string>(values.begin(), values.end());
}

}  // namespace loom
