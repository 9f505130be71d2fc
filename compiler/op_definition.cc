#include "compiler/op_definition.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom::compiler {

std::string TensorType::ToString() const {
  return absl::StrCat(DataTypeName(data_type), shape.ToString());
}

std::string SbpSignature::ToString() const {
  std::vector<std::string> in;
  std::vector<std::string> out;
  for (const Sbp& sbp : inputs) in.push_back(sbp.ToString());
  for (const Sbp& sbp : outputs) out.push_back(sbp.ToString());
  return absl::StrCat("(", absl::StrJoin(in, ", "), ") -> (", absl::StrJoin(out, ", "), ")");
}

absl::StatusOr<int64_t> OpAttributes::GetInt(const std::string& name) const {
  auto iterator = attributes_.find(name);
  if (iterator == attributes_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
  }
  if (!iterator->second.has_int_value()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be an integer"));
  }
  return iterator->second.int_value();
}

absl::StatusOr<std::string> OpAttributes::GetString(const std::string& name) const {
  auto iterator = attributes_.find(name);
  if (iterator == attributes_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
  }
  if (!iterator->second.has_string_value()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be a string"));
  }
  return iterator->second.string_value();
}

absl::StatusOr<int64_t> OpAttributes::GetInt(const std::string& name, int64_t default_value) const {
  if (!Has(name)) return default_value;
  return GetInt(name);
}

absl::StatusOr<double> OpAttributes::GetFloat(const std::string& name, double default_value) const {
  auto iterator = attributes_.find(name);
  if (iterator == attributes_.end()) return default_value;
  if (iterator->second.has_float_value()) return iterator->second.float_value();
  if (iterator->second.has_int_value()) return static_cast<double>(iterator->second.int_value());
  return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be a number"));
}

absl::StatusOr<bool> OpAttributes::GetBool(const std::string& name, bool default_value) const {
  auto iterator = attributes_.find(name);
  if (iterator == attributes_.end()) return default_value;
  if (!iterator->second.has_bool_value()) {
    return absl::InvalidArgumentError(absl::StrCat("attribute '", name, "' must be a boolean"));
  }
  return iterator->second.bool_value();
}

absl::StatusOr<std::vector<int64_t>> OpAttributes::GetIntList(const std::string& name) const {
  auto iterator = attributes_.find(name);
  if (iterator == attributes_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("missing attribute '", name, "'"));
  }
  if (!iterator->second.has_int_list()) {
    return absl::InvalidArgumentError(
        absl::StrCat("attribute '", name, "' must be a list of integers"));
  }
  const auto& values = iterator->second.int_list().values();
  return std::vector<int64_t>(values.begin(), values.end());
}

absl::StatusOr<plan::KernelConf> OpDefinition::Lower(const std::string& op_type,
                                                     const LoweringContext& context) const {
  plan::KernelConf conf;
  conf.set_op_type(op_type);
  *conf.mutable_attributes() = *context.op->attributes;
  return conf;
}

absl::StatusOr<std::vector<std::string>> OpDefinition::Gradient(const GradientRequest& request,
                                                                GradientBuilder* builder) const {
  return absl::UnimplementedError("op type has no gradient");
}

absl::Status OpRegistry::Register(const std::string& op_type,
                                  std::unique_ptr<OpDefinition> definition) {
  if (!definitions_.emplace(op_type, std::move(definition)).second) {
    return absl::AlreadyExistsError(absl::StrCat("op type '", op_type, "' is registered twice"));
  }
  return absl::OkStatus();
}

const OpDefinition* OpRegistry::Find(const std::string& op_type) const {
  auto iterator = definitions_.find(op_type);
  return iterator == definitions_.end() ? nullptr : iterator->second.get();
}

std::vector<std::string> OpRegistry::OpTypes() const {
  std::vector<std::string> names;
  for (const auto& [name, definition] : definitions_) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

absl::Status OpError(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status CheckInputCount(const OpContext& context, int min_inputs, int max_inputs) {
  int count = static_cast<int>(context.inputs.size());
  if (count < min_inputs || (max_inputs >= 0 && count > max_inputs)) {
    std::string expected = min_inputs == max_inputs ? absl::StrCat(min_inputs)
                           : max_inputs < 0         ? absl::StrCat("at least ", min_inputs)
                                                    : absl::StrCat(min_inputs, " to ", max_inputs);
    return OpError(absl::StrCat("takes ", expected, " inputs, not ", count));
  }
  return absl::OkStatus();
}

absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, const std::string& what) {
  int64_t normalized = axis < 0 ? axis + rank : axis;
  if (normalized < 0 || normalized >= rank) {
    return OpError(absl::StrCat(what, " ", axis, " is out of range for rank ", rank));
  }
  return static_cast<int>(normalized);
}

}  // namespace loom::compiler
