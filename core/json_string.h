#ifndef LOOM_CORE_JSON_STRING_H_
#define LOOM_CORE_JSON_STRING_H_

// JsonString: a string as a quoted JSON literal, with quotes, backslashes and control characters
// escaped, for the JSON that Loom's tools print (Chrome traces, loomctl's --output json). The
// strict escaper of checkpoint files, which requires valid UTF-8, is checkpoint::AppendJsonString
// (core/json.h).

#include <string>

#include "absl/strings/string_view.h"

namespace loom {

// `text` as a quoted JSON string literal: quotes, backslashes and control characters escaped
// ("\n", "\u0001", ...); other bytes, UTF-8 included, are kept as they are. For the JSON that
// Loom's tools print (traces, loomctl's --output json); checkpoint::AppendJsonString is the strict
// one, for files that must be valid UTF-8.
std::string JsonString(absl::string_view text);

}  // namespace loom

#endif  // LOOM_CORE_JSON_STRING_H_
