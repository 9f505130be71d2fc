#include "tests/core/json_test_util.h"

#include <cstdlib>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace loom::testing {
namespace {

class JsonParser {
 public:
  explicit JsonParser(const std::string& text) : text_(text) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    JsonValue value;
    if (absl::Status status = ParseValue(&value, 0); !status.ok()) return status;
    SkipSpace();
    if (position_ != text_.size()) return Error("trailing content after the value");
    return value;
  }

 private:
  static constexpr int kMaxDepth = 64;

  absl::Status Error(const std::string& message) const {
    return absl::InvalidArgumentError(
        absl::StrCat("JSON error at byte ", position_, ": ", message));
  }

  void SkipSpace() {
    while (position_ < text_.size() && (text_[position_] == ' ' || text_[position_] == '\n' ||
                                        text_[position_] == '\r' || text_[position_] == '\t')) {
      ++position_;
    }
  }

  bool Consume(const std::string& literal) {
    if (text_.compare(position_, literal.size(), literal) != 0) return false;
    position_ += literal.size();
    return true;
  }

  absl::Status ParseValue(JsonValue* value, int depth) {
    if (depth > kMaxDepth) return Error("nested too deeply");
    SkipSpace();
    if (position_ >= text_.size()) return Error("unexpected end of input");
    char next = text_[position_];
    if (next == '{') return ParseObject(value, depth);
    if (next == '[') return ParseArray(value, depth);
    if (next == '"') {
      value->type = JsonValue::Type::kString;
      return ParseString(&value->string);
    }
    if (Consume("null")) {
      value->type = JsonValue::Type::kNull;
      return absl::OkStatus();
    }
    if (Consume("true")) {
      value->type = JsonValue::Type::kBool;
      value->boolean = true;
      return absl::OkStatus();
    }
    if (Consume("false")) {
      value->type = JsonValue::Type::kBool;
      value->boolean = false;
      return absl::OkStatus();
    }
    return ParseNumber(value);
  }

  absl::Status ParseNumber(JsonValue* value) {
    size_t start = position_;
    if (position_ < text_.size() && text_[position_] == '-') ++position_;
    auto digits = [&] {
      size_t first = position_;
      while (position_ < text_.size() && absl::ascii_isdigit(text_[position_])) ++position_;
      return position_ - first;
    };
    size_t integer_digits = digits();
    if (integer_digits == 0) return Error("expected a value");
    if (integer_digits > 1 && text_[start + (text_[start] == '-' ? 1 : 0)] == '0') {
      return Error("a number with a leading zero");
    }
    if (position_ < text_.size() && text_[position_] == '.') {
      ++position_;
      if (digits() == 0) return Error("no digits after the decimal point");
    }
    if (position_ < text_.size() && (text_[position_] == 'e' || text_[position_] == 'E')) {
      ++position_;
      if (position_ < text_.size() && (text_[position_] == '+' || text_[position_] == '-')) {
        ++position_;
      }
      if (digits() == 0) return Error("no digits in the exponent");
    }
    value->type = JsonValue::Type::kNumber;
    value->number = std::strtod(text_.substr(start, position_ - start).c_str(), nullptr);
    return absl::OkStatus();
  }

  static void AppendUtf8(uint32_t code_point, std::string* out) {
    if (code_point < 0x80) {
      *out += static_cast<char>(code_point);
    } else if (code_point < 0x800) {
      *out += static_cast<char>(0xC0 | (code_point >> 6));
      *out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else if (code_point < 0x10000) {
      *out += static_cast<char>(0xE0 | (code_point >> 12));
      *out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (code_point & 0x3F));
    } else {
      *out += static_cast<char>(0xF0 | (code_point >> 18));
      *out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
      *out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
      *out += static_cast<char>(0x80 | (code_point & 0x3F));
    }
  }

  absl::Status ParseHex4(uint32_t* code_unit) {
    if (position_ + 4 > text_.size()) return Error("short \\u escape");
    *code_unit = 0;
    for (int i = 0; i < 4; ++i) {
      char digit = text_[position_++];
      if (!absl::ascii_isxdigit(digit)) return Error("bad hex digit in a \\u escape");
      *code_unit =
          *code_unit * 16 +
          (absl::ascii_isdigit(digit) ? digit - '0' : absl::ascii_tolower(digit) - 'a' + 10);
    }
    return absl::OkStatus();
  }

  absl::Status ParseString(std::string* out) {
    ++position_;  // the opening quote
    while (true) {
      if (position_ >= text_.size()) return Error("unterminated string");
      char character = text_[position_++];
      if (character == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(character) < 0x20) {
        return Error("an unescaped control character in a string");
      }
      if (character != '\\') {
        *out += character;
        continue;
      }
      if (position_ >= text_.size()) return Error("unterminated escape");
      char escape = text_[position_++];
      switch (escape) {
        case '"':
        case '\\':
        case '/':
          *out += escape;
          break;
        case 'b':
          *out += '\b';
          break;
        case 'f':
          *out += '\f';
          break;
        case 'n':
          *out += '\n';
          break;
        case 'r':
          *out += '\r';
          break;
        case 't':
          *out += '\t';
          break;
        case 'u': {
          uint32_t code_unit = 0;
          if (absl::Status status = ParseHex4(&code_unit); !status.ok()) return status;
          if (code_unit >= 0xD800 && code_unit < 0xDC00) {
            uint32_t low = 0;
            if (!Consume("\\u")) return Error("a lone high surrogate");
            if (absl::Status status = ParseHex4(&low); !status.ok()) return status;
            if (low < 0xDC00 || low >= 0xE000) return Error("a bad low surrogate");
            code_unit = 0x10000 + ((code_unit - 0xD800) << 10) + (low - 0xDC00);
          }
          AppendUtf8(code_unit, out);
          break;
        }
        default:
          return Error(absl::StrCat("unknown escape \\", std::string(1, escape)));
      }
    }
  }

  absl::Status ParseArray(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kArray;
    ++position_;
    SkipSpace();
    if (Consume("]")) return absl::OkStatus();
    while (true) {
      value->array.emplace_back();
      if (absl::Status status = ParseValue(&value->array.back(), depth + 1); !status.ok()) {
        return status;
      }
      SkipSpace();
      if (Consume("]")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or ']' in an array");
    }
  }

  absl::Status ParseObject(JsonValue* value, int depth) {
    value->type = JsonValue::Type::kObject;
    ++position_;
    SkipSpace();
    if (Consume("}")) return absl::OkStatus();
    while (true) {
      SkipSpace();
      if (position_ >= text_.size() || text_[position_] != '"') {
        return Error("expected a string key in an object");
      }
      std::string key;
      if (absl::Status status = ParseString(&key); !status.ok()) return status;
      SkipSpace();
      if (!Consume(":")) return Error("expected ':' after an object key");
      JsonValue member;
      if (absl::Status status = ParseValue(&member, depth + 1); !status.ok()) return status;
      value->object.emplace_back(std::move(key), std::move(member));
      SkipSpace();
      if (Consume("}")) return absl::OkStatus();
      if (!Consume(",")) return Error("expected ',' or '}' in an object");
    }
  }

  const std::string& text_;
  size_t position_ = 0;
};

}  // namespace

const JsonValue* JsonValue::Find(const std::string& key) const {
  if (type != Type::kObject) return nullptr;
  for (const auto& [name, value] : object) {
    if (name == key) return &value;
  }
  return nullptr;
}

absl::StatusOr<JsonValue> ParseJson(const std::string& text) {
  return JsonParser(text).ParseDocument();
}

}  // namespace loom::testing
