#include "core/json.h"

#include <string>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::checkpoint {
namespace {

using ::testing::HasSubstr;
using namespace std::string_literals;

TEST(JsonTest, ParsesEveryKindOfValue) {
  absl::StatusOr<JsonValue> value = ParseJson(
      " \t\r\n{\"null\": null, \"yes\": true, \"no\": false, \"number\": -12.5e+3,"
      " \"string\": \"text\", \"array\": [1, [], {}], \"object\": {\"inner\": \"x\"}} \n");
  ASSERT_TRUE(value.ok()) << value.status();
  ASSERT_TRUE(value->is_object());
  ASSERT_EQ(value->members().size(), 7);
  EXPECT_EQ(value->members()[0].first, "null");  // document order
  EXPECT_TRUE(value->Find("null")->is_null());
  EXPECT_TRUE(value->Find("yes")->bool_value());
  EXPECT_FALSE(value->Find("no")->bool_value());
  EXPECT_EQ(value->Find("number")->number_text(), "-12.5e+3");
  EXPECT_EQ(value->Find("string")->string_value(), "text");
  const JsonValue* array = value->Find("array");
  ASSERT_TRUE(array->is_array());
  ASSERT_EQ(array->elements().size(), 3);
  EXPECT_EQ(array->elements()[0].AsUint64(), 1u);
  EXPECT_TRUE(array->elements()[1].is_array());
  EXPECT_TRUE(array->elements()[2].is_object());
  EXPECT_EQ(value->Find("object")->Find("inner")->string_value(), "x");
  EXPECT_EQ(value->Find("missing"), nullptr);
  EXPECT_EQ(array->Find("anything"), nullptr);

  for (const char* text : {"0", "[]", "{}", "\"\"", "true", "null", "-0", "1E5", "0.5e-3"}) {
    EXPECT_TRUE(ParseJson(text).ok()) << text;
  }
}

TEST(JsonTest, AsUint64AcceptsOnlyPlainNonNegativeIntegers) {
  auto as_uint64 = [](const char* text) { return ParseJson(text)->AsUint64(); };
  EXPECT_EQ(as_uint64("0"), 0u);
  EXPECT_EQ(as_uint64("42"), 42u);
  EXPECT_EQ(as_uint64("18446744073709551615"), UINT64_MAX);
  EXPECT_EQ(as_uint64("18446744073709551616"), std::nullopt);
  EXPECT_EQ(as_uint64("99999999999999999999999"), std::nullopt);
  EXPECT_EQ(as_uint64("-1"), std::nullopt);
  EXPECT_EQ(as_uint64("-0"), std::nullopt);
  EXPECT_EQ(as_uint64("1.0"), std::nullopt);
  EXPECT_EQ(as_uint64("1e2"), std::nullopt);
  EXPECT_EQ(as_uint64("\"1\""), std::nullopt);
  EXPECT_EQ(as_uint64("true"), std::nullopt);
}

TEST(JsonTest, DecodesStringEscapesAndUtf8) {
  absl::StatusOr<JsonValue> value =
      ParseJson(R"("q\" b\\ s\/ \b\f\n\r\t \u00e9 \u20AC \ud83d\ude00 \u0000 caf)"
                "\xc3\xa9"
                R"( )"
                "\xf0\x9f\x98\x80"
                R"(")");
  ASSERT_TRUE(value.ok()) << value.status();
  EXPECT_EQ(
      value->string_value(),
      "q\" b\\ s/ \b\f\n\r\t \xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \0 caf\xc3\xa9 \xf0\x9f\x98\x80"s);
}

TEST(JsonTest, RejectsEverythingThatIsNotStrictJson) {
  const char* const kInvalid[] = {
      "",
      "   ",
      "{",
      "}",
      "[1,]",
      "{\"a\":1,}",
      "[1 2]",
      "{\"a\" 1}",
      "{\"a\":}",
      "{a:1}",
      "{'a':1}",
      "['a']",
      "{\"a\":1}}",
      "{} {}",
      "{}x",
      "01",
      "-",
      "+1",
      "1.",
      ".5",
      "1e",
      "1e+",
      "0x10",
      "NaN",
      "Infinity",
      "-Infinity",
      "tru",
      "nul",
      "True",
      "\"unterminated",
      "\"bad escape \\x\"",
      "\"bad escape \\u12\"",
      "\"bad escape \\u12G4\"",
      "\"lone high \\ud800\"",
      "\"lone high \\ud800x\"",
      "\"high then high \\ud800\\ud800\"",
      "\"lone low \\udc00\"",
      "\"raw tab \t\"",
      "\"raw newline \n\"",
      "\"overlong \xc0\x80\"",
      "\"overlong \xe0\x80\x80\"",
      "\"surrogate \xed\xa0\x80\"",
      "\"too large \xf4\x90\x80\x80\"",
      "\"bad lead \xf5\x80\x80\x80\"",
      "\"truncated \xe2\x82\"",
      "\"stray continuation \x80\"",
      "/* comment */ {}",
      "\xef\xbb\xbf{}",  // a byte order mark
      "{}\f",            // form feed is not JSON whitespace
  };
  for (const char* text : kInvalid) {
    absl::StatusOr<JsonValue> value = ParseJson(text);
    EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument) << absl::CHexEscape(text);
    EXPECT_THAT(value.status().message(), HasSubstr("invalid JSON at byte "))
        << absl::CHexEscape(text);
  }
  EXPECT_FALSE(ParseJson("\"raw nul \0\""s).ok());
}

TEST(JsonTest, ErrorsSayWhereAndWhat) {
  absl::StatusOr<JsonValue> value = ParseJson("{\"a\": [1, 2,]}");
  EXPECT_EQ(value.status().message(), "invalid JSON at byte 12: expected a value (found ']')");
  value = ParseJson("{\"a\": 1");
  EXPECT_EQ(value.status().message(),
            "invalid JSON at byte 7: expected ',' or '}' in an object (found the end of the text)");
}

TEST(JsonTest, RejectsDuplicateKeys) {
  absl::StatusOr<JsonValue> value = ParseJson(R"({"a": 1, "b": {"a": 2}, "a": 3})");
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(value.status().message(), HasSubstr("duplicate key \"a\""));
  EXPECT_THAT(value.status().message(), HasSubstr("at byte 24"));
  // Keys are compared after unescaping.
  value = ParseJson(R"({"a": 1, "\u0061": 2})");
  EXPECT_THAT(value.status().message(), HasSubstr("duplicate key \"a\""));
  // The same key in different objects is fine.
  EXPECT_TRUE(ParseJson(R"({"a": {"a": {"a": 1}}})").ok());
}

TEST(JsonTest, LimitsNesting) {
  auto nested = [](int depth) { return std::string(depth, '[') + std::string(depth, ']'); };
  EXPECT_TRUE(ParseJson(nested(kDefaultJsonMaxDepth)).ok());
  absl::StatusOr<JsonValue> value = ParseJson(nested(kDefaultJsonMaxDepth + 1));
  EXPECT_THAT(value.status().message(), HasSubstr("nesting deeper than 64 levels"));
  EXPECT_TRUE(ParseJson(nested(3), 3).ok());
  EXPECT_FALSE(ParseJson(nested(4), 3).ok());
  // Deep enough to overflow the stack without the limit; open brackets only, and objects.
  EXPECT_FALSE(ParseJson(std::string(1'000'000, '[')).ok());
  std::string objects;
  for (int i = 0; i < 100'000; ++i) objects += "{\"a\":";
  EXPECT_FALSE(ParseJson(objects).ok());
}

TEST(JsonTest, ValidatesUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("plain ascii \x7f"));
  EXPECT_TRUE(IsValidUtf8(std::string("nul \0 inside", 12)));
  EXPECT_TRUE(IsValidUtf8("\xc2\x80 \xdf\xbf \xe0\xa0\x80 \xed\x9f\xbf \xee\x80\x80 \xef\xbf\xbf"));
  EXPECT_TRUE(IsValidUtf8("\xf0\x90\x80\x80 \xf4\x8f\xbf\xbf \xf3\xbf\xbf\xbf"));
  for (const char* invalid :
       {"\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xc2", "\xc2\x41", "\xe0\x80\x80", "\xe0\x9f\xbf",
        "\xed\xa0\x80", "\xed\xbf\xbf", "\xe2\x82", "\xf0\x80\x80\x80", "\xf0\x8f\xbf\xbf",
        "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff", "\xfe", "\xf0\x9f\x98"}) {
    EXPECT_FALSE(IsValidUtf8(invalid)) << absl::CHexEscape(invalid);
  }
}

TEST(JsonTest, EscapesStringsAsSerdeJsonAndPythonDo) {
  std::string out = "prefix ";
  ASSERT_TRUE(AppendJsonString("q\" b\\ s/ \b\f\n\r\t \x01\x1f\x7f caf\xc3\xa9 \0"s, &out).ok());
  EXPECT_EQ(out,
            "prefix \"q\\\" b\\\\ s/ \\b\\f\\n\\r\\t \\u0001\\u001f\x7f caf\xc3\xa9 \\u0000\"");

  out = "unchanged";
  absl::Status status = AppendJsonString("bad \xff", &out);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not valid UTF-8"));
  EXPECT_EQ(out, "unchanged");
}

TEST(JsonTest, EscapedStringsParseBack) {
  std::string all_ascii;
  for (int c = 0; c < 128; ++c) all_ascii += static_cast<char>(c);
  for (const std::string& text :
       {all_ascii, std::string(""), std::string("\xe2\x82\xac \xf0\x9f\x98\x80 \xc3\xa9")}) {
    std::string json;
    ASSERT_TRUE(AppendJsonString(text, &json).ok());
    absl::StatusOr<JsonValue> value = ParseJson(json);
    ASSERT_TRUE(value.ok()) << value.status();
    EXPECT_EQ(value->string_value(), text);
  }
}

}  // namespace
}  // namespace loom::checkpoint
