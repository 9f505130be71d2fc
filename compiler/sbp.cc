#include "compiler/sbp.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace loom::compiler {

std::string Sbp::ToString() const {
  switch (kind) {
    case Kind::kSplit:
      return absl::StrCat("S(", axis, ")");
    case Kind::kBroadcast:
      return "B";
    case Kind::kPartialSum:
      return "P";
    case Kind::kPartialMax:
      return "P(max)";
  }
  return "?";
}

absl::StatusOr<Sbp> ParseSbp(const std::string& text) {
  std::string compact = absl::StrReplaceAll(text, {{" ", ""}, {"\t", ""}});
  absl::string_view view(compact);
  if (view == "B" || view == "Replicate" || view == "Replicate()") return Sbp::Broadcast();
  if (view == "P" || view == "P(sum)" || view == "Partial" || view == "Partial()" ||
      view == "Partial(sum)") {
    return Sbp::PartialSum();
  }
  if (view == "P(max)" || view == "Partial(max)") return Sbp::PartialMax();
  for (absl::string_view prefix : {"S(", "Shard("}) {
    if (absl::ConsumePrefix(&view, prefix) && absl::ConsumeSuffix(&view, ")")) {
      int axis;
      if (absl::SimpleAtoi(view, &axis) && axis >= 0) return Sbp::Split(axis);
      break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("cannot parse SBP '", text,
                   "' (expected S(axis), B or P, or Shard(axis), Replicate or Partial)"));
}

absl::StatusOr<NdSbp> ParseNdSbp(const std::vector<std::string>& texts) {
  NdSbp result;
  for (const std::string& text : texts) {
    absl::StatusOr<Sbp> sbp = ParseSbp(text);
    if (!sbp.ok()) return sbp.status();
    result.push_back(*sbp);
  }
  return result;
}

std::string NdSbpToString(const NdSbp& sbp) {
  if (sbp.size() == 1) return sbp[0].ToString();
  std::vector<std::string> parts;
  for (const Sbp& axis : sbp) parts.push_back(axis.ToString());
  return absl::StrCat("(", absl::StrJoin(parts, ", "), ")");
}

}  // namespace loom::compiler
