#include "compiler/ops/op_checks.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom::compiler {

OpAttributes AttributesOf(const OpContext& context) {
  static const AttributeMap* const kNoAttributes = new AttributeMap();
  return OpAttributes(context.attributes == nullptr ? *kNoAttributes : *context.attributes);
}

absl::Status CheckKnownAttributes(const OpContext& context,
                                  std::initializer_list<const char*> known) {
  if (context.attributes == nullptr) return absl::OkStatus();
  std::vector<std::string> unknown;
  for (const auto& [name, value] : *context.attributes) {
    if (std::find_if(known.begin(), known.end(),
                     [&](const char* candidate) { return name == candidate; }) == known.end()) {
      unknown.push_back(name);
    }
  }
  if (unknown.empty()) return absl::OkStatus();
  std::sort(unknown.begin(), unknown.end());
  return OpError(absl::StrCat(
      "unknown attribute", unknown.size() == 1 ? " '" : "s '", absl::StrJoin(unknown, "', '"),
      "' (known: ", known.size() == 0 ? "none" : absl::StrJoin(known, ", "), ")"));
}

absl::Status CheckInputDataType(const OpContext& context, int index, const std::string& name,
                                std::initializer_list<plan::DataType> allowed) {
  const plan::DataType actual = context.inputs[index].data_type;
  if (std::find(allowed.begin(), allowed.end(), actual) != allowed.end()) {
    return absl::OkStatus();
  }
  std::vector<std::string> names;
  for (plan::DataType data_type : allowed) names.push_back(DataTypeName(data_type));
  return OpError(absl::StrCat("input '", name, "' must be ", absl::StrJoin(names, " or "), ", not ",
                              DataTypeName(actual)));
}

absl::Status CheckInputMinimumRank(const OpContext& context, int index, const std::string& name,
                                   int minimum_rank) {
  const Shape& shape = context.inputs[index].shape;
  if (shape.rank() >= minimum_rank) return absl::OkStatus();
  return OpError(absl::StrCat("input '", name, "' must have rank >= ", minimum_rank, ", not ",
                              shape.rank(), " (shape ", shape.ToString(), ")"));
}

absl::StatusOr<std::vector<int>> NormalizeAxes(const std::vector<int64_t>& axes, int rank,
                                               const std::string& what) {
  std::vector<int> normalized;
  for (int64_t axis : axes) {
    absl::StatusOr<int> one = NormalizeAxis(axis, rank, what);
    if (!one.ok()) return one.status();
    if (std::find(normalized.begin(), normalized.end(), *one) != normalized.end()) {
      return OpError(absl::StrCat(what, " ", axis, " is repeated in ", FormatList(axes)));
    }
    normalized.push_back(*one);
  }
  std::sort(normalized.begin(), normalized.end());
  return normalized;
}

std::string FormatList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

plan::AttributeValue IntAttribute(int64_t value) {
  plan::AttributeValue attribute;
  attribute.set_int_value(value);
  return attribute;
}

plan::AttributeValue FloatAttribute(double value) {
  plan::AttributeValue attribute;
  attribute.set_float_value(value);
  return attribute;
}

plan::AttributeValue IntListAttribute(const std::vector<int64_t>& values) {
  plan::AttributeValue attribute;
  // Set the list even when it is empty, so that the attribute holds a list.
  auto* list = attribute.mutable_int_list();
  for (int64_t value : values) list->add_values(value);
  return attribute;
}

plan::KernelConf EmptyKernelConf(const std::string& op_type) {
  plan::KernelConf conf;
  conf.set_op_type(op_type);
  return conf;
}

bool SplitsAxis(const NdSbp& sbp, int axis) {
  return std::any_of(sbp.begin(), sbp.end(),
                     [axis](const Sbp& one) { return one.is_split() && one.axis == axis; });
}

AxisRange LocalRange(const NdSbp& sbp, int axis, int64_t length,
                     const std::vector<int64_t>& coordinates,
                     const std::vector<int64_t>& hierarchy) {
  AxisRange range{0, length};
  for (size_t level = 0; level < sbp.size() && level < hierarchy.size(); ++level) {
    if (!sbp[level].is_split() || sbp[level].axis != axis) continue;
    AxisRange part = BalancedRange(range.size(), hierarchy[level], coordinates[level]);
    range = AxisRange{range.begin + part.begin, range.begin + part.end};
  }
  return range;
}

}  // namespace loom::compiler
