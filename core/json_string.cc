#include "core/json_string.h"

#include "absl/strings/str_format.h"

namespace loom {

std::string JsonString(absl::string_view text) {
  std::string result = "\"";
  result.reserve(text.size() + 2);
  for (char character : text) {
    switch (character) {
      case '"':
        result += "\\\"";
        break;
      case '\\':
        result += "\\\\";
        break;
      case '\b':
        result += "\\b";
        break;
      case '\f':
        result += "\\f";
        break;
      case '\n':
        result += "\\n";
        break;
      case '\r':
        result += "\\r";
        break;
      case '\t':
        result += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(character) < 0x20) {
          absl::StrAppendFormat(&result, "\\u%04x", static_cast<unsigned char>(character));
        } else {
          result += character;
        }
    }
  }
  result += '"';
  return result;
}

}  // namespace loom
