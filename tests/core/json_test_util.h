#ifndef LOOM_TESTS_CORE_JSON_TEST_UTIL_H_
#define LOOM_TESTS_CORE_JSON_TEST_UTIL_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace loom::testing {

// A parsed JSON value, for tests that check what the tools write. Strict (RFC 8259): a file the
// parser accepts is one Perfetto and Python's json module accept too.
struct JsonValue {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject };

  Type type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string string;
  std::vector<JsonValue> array;
  std::vector<std::pair<std::string, JsonValue>> object;  // in file order

  // The member `key` of an object; nullptr when absent or not an object.
  const JsonValue* Find(const std::string& key) const;
};

// INVALID_ARGUMENT with the byte offset on malformed JSON or trailing content.
absl::StatusOr<JsonValue> ParseJson(const std::string& text);

}  // namespace loom::testing

#endif  // LOOM_TESTS_CORE_JSON_TEST_UTIL_H_
