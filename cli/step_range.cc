#include "cli/step_range.h"

#include <cstdint>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace loom::cli {

absl::StatusOr<v1::StepRange> ParseStepRange(absl::string_view text) {
  auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a range of steps (write K or K-L, from 1): ", why));
  };
  const std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits('-', 1));
  int64_t first = 0;
  int64_t last = 0;
  if (!absl::SimpleAtoi(parts.first, &first)) return invalid("the first step is not a number");
  const bool single = text.find('-') == absl::string_view::npos;
  if (single) {
    last = first;
  } else if (!absl::SimpleAtoi(parts.second, &last)) {
    return invalid("the last step is not a number");
  }
  if (first < 1) return invalid("steps count from 1");
  if (last < first) return invalid("the last step comes before the first");
  v1::StepRange range;
  range.set_first(first);
  range.set_last(last);
  return range;
}

absl::StatusOr<std::optional<v1::StepRange>> TraceStepsFlag(absl::string_view command,
                                                            const ParsedArguments& arguments,
                                                            bool traced) {
  if (!arguments.Has("trace-steps")) return std::nullopt;
  if (!traced) return UsageError(command, "--trace-steps needs --trace");
  absl::StatusOr<v1::StepRange> range = ParseStepRange(arguments.Value("trace-steps"));
  if (!range.ok()) {
    return UsageError(command, absl::StrCat("--trace-steps: ", range.status().message()));
  }
  return *range;
}

absl::Status CheckTraceStepsWithin(absl::string_view command, const v1::StepRange& range,
                                   int64_t first, int64_t last, absl::string_view what) {
  if (range.first() >= first && range.last() <= last) return absl::OkStatus();
  return UsageError(command, absl::StrCat("--trace-steps ", range.first(), "-", range.last(),
                                          " is not within ", what, "'s steps ", first, "-", last));
}

}  // namespace loom::cli
