// JsonString: what loomctl and the traces print as JSON strings parses back to the same text.
#include "core/json_string.h"

#include <string>

#include "gtest/gtest.h"
#include "tests/core/json_test_util.h"

namespace loom::testing {
namespace {

TEST(JsonStringTest, EscapesWhatJsonRequires) {
  EXPECT_EQ(JsonString("plain"), "\"plain\"");
  EXPECT_EQ(JsonString("a\"b\\c"), "\"a\\\"b\\\\c\"");
  EXPECT_EQ(JsonString("\n\r\t\b\f"), "\"\\n\\r\\t\\b\\f\"");
  EXPECT_EQ(JsonString(std::string("\x01\x1f", 2)), "\"\\u0001\\u001f\"");
  EXPECT_EQ(JsonString(std::string("a\0b", 3)), "\"a\\u0000b\"");
  EXPECT_EQ(JsonString("caf\xc3\xa9 /"), "\"caf\xc3\xa9 /\"");
  for (const std::string& text : {std::string("x\"y\\z\n\x02"), std::string("")}) {
    absl::StatusOr<JsonValue> parsed = ParseJson(JsonString(text));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    EXPECT_EQ(parsed->string, text);
  }
}

}  // namespace
}  // namespace loom::testing
