#ifndef LOOM_CORE_JSON_H_
#define LOOM_CORE_JSON_H_

// A strict JSON (RFC 8259) reader and the JSON string escaping of safetensors files: JsonValue (one
// parsed value), ParseJson with a nesting limit, IsValidUtf8 and AppendJsonString. The safetensors
// header reader and writer use it, and so does loomctl's cluster state.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::checkpoint {

// A small, strict JSON (RFC 8259) reader for safetensors headers, which are untrusted input, and
// the string escaping the safetensors writer needs.
//
// Strict means: exactly one value, surrounded by optional whitespace (space, tab, newline,
// carriage return); no comments, trailing commas, single quotes, NaN or Infinity, leading zeros or
// '+' signs; strings are valid UTF-8 with no raw control characters and no unpaired surrogate
// escapes; no object has a key twice. Nesting deeper than a limit is rejected, so a hostile input
// cannot exhaust the stack.
//
// Why not a library: absl has no JSON parser, and protobuf's JsonStringToMessage into a
// google::protobuf::Struct (Debian's protobuf 3.21) accepts single quotes and trailing commas and
// reads every number as a double, so integers past 2^53 (offsets, dimensions) silently round.
class JsonValue {
 public:
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  using Member = std::pair<std::string, JsonValue>;

  JsonValue() = default;
  static JsonValue Null() { return JsonValue(); }
  static JsonValue Bool(bool value);
  // `text` is the number as written; the parser only builds numbers from valid number syntax.
  static JsonValue Number(std::string text);
  static JsonValue String(std::string value);
  static JsonValue Array(std::vector<JsonValue> elements);
  static JsonValue Object(std::vector<Member> members);

  Kind kind() const { return kind_; }
  bool is_null() const { return kind_ == Kind::kNull; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_number() const { return kind_ == Kind::kNumber; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }

  // Each accessor requires the matching kind.
  bool bool_value() const { return bool_; }
  // The number exactly as written, e.g. "-1.5e3".
  const std::string& number_text() const { return text_; }
  // The decoded string (UTF-8; may contain NUL characters).
  const std::string& string_value() const { return text_; }
  const std::vector<JsonValue>& elements() const { return elements_; }
  // In document order; keys are unique.
  const std::vector<Member>& members() const { return members_; }

  // The member named `key` of an object, or nullptr (also when this is not an object).
  const JsonValue* Find(absl::string_view key) const;

  // The number as an unsigned 64-bit integer when it is written as one: digits only (no sign,
  // fraction or exponent) and at most 2^64 - 1. nullopt otherwise, and for non-numbers.
  std::optional<uint64_t> AsUint64() const;

  // For error messages: "null", "a boolean", "the number 1.5", "a string", "an array" or
  // "an object".
  std::string Describe() const;

 private:
  Kind kind_ = Kind::kNull;
  bool bool_ = false;
  std::string text_;  // number text or string value
  std::vector<JsonValue> elements_;
  std::vector<Member> members_;
};

// The default nesting limit of ParseJson: far more than any safetensors header needs (3).
inline constexpr int kDefaultJsonMaxDepth = 64;

// Parses `text` as one JSON value. INVALID_ARGUMENT on any deviation from strict JSON (see
// above), saying what was expected and at which byte offset of `text`.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth = kDefaultJsonMaxDepth);

// Whether `text` is well-formed UTF-8 (no overlong forms, surrogates or code points past
// U+10FFFF).
bool IsValidUtf8(absl::string_view text);

// Appends `text` to `out` as a JSON string literal, in quotes, escaped exactly as serde_json (the
// reference safetensors writer) and Python's json.dumps(ensure_ascii=False) escape: '"' and '\\'
// with a backslash; \b \t \n \f \r by name; other characters below U+0020 as \u00xx (lowercase
// hex); everything else, non-ASCII included, as is. INVALID_ARGUMENT (leaving `out` unchanged)
// when `text` is not valid UTF-8, which JSON cannot represent.
absl::Status AppendJsonString(absl::string_view text, std::string* out);

}  // namespace loom::checkpoint

#endif  // LOOM_CORE_JSON_H_
