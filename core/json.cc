#include "core/json.h"

#include <unordered_set>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace loom::checkpoint {
namespace {

// The length of the well-formed UTF-8 sequence at text[pos] (Unicode table 3-7), or 0 when the
// bytes there are not one.
size_t Utf8SequenceLength(absl::string_view text, size_t pos) {
  auto byte = [&](size_t i) -> unsigned {
    return pos + i < text.size() ? static_cast<unsigned char>(text[pos + i]) : 0x100;
  };
  auto in = [](unsigned value, unsigned low, unsigned high) {
    return value >= low && value <= high;
  };
  unsigned lead = byte(0);
  if (lead <= 0x7F) return 1;
  if (in(lead, 0xC2, 0xDF)) return in(byte(1), 0x80, 0xBF) ? 2 : 0;
  if (in(lead, 0xE0, 0xEF)) {
    unsigned low = lead == 0xE0 ? 0xA0 : 0x80;   // no overlong forms
    unsigned high = lead == 0xED ? 0x9F : 0xBF;  // no surrogates
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) ? 3 : 0;
  }
  if (in(lead, 0xF0, 0xF4)) {
    unsigned low = lead == 0xF0 ? 0x90 : 0x80;   // no overlong forms
    unsigned high = lead == 0xF4 ? 0x8F : 0xBF;  // nothing past U+10FFFF
    return in(byte(1), low, high) && in(byte(2), 0x80, 0xBF) && in(byte(3), 0x80, 0xBF) ? 4 : 0;
  }
  return 0;
}

void AppendUtf8(uint32_t code_point, std::string* out) {
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

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

class Parser {
 public:
  Parser(absl::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  absl::StatusOr<JsonValue> ParseDocument() {
    SkipWhitespace();
    absl::StatusOr<JsonValue> value = ParseValue(0);
    if (!value.ok()) return value.status();
    SkipWhitespace();
    if (pos_ != text_.size()) return Error("unexpected data after the JSON value");
    return value;
  }

 private:
  absl::Status Error(absl::string_view what) const { return ErrorAt(pos_, what); }
  absl::Status ErrorAt(size_t pos, absl::string_view what) const {
    std::string found =
        pos < text_.size() ? absl::StrCat(" (found '", absl::CHexEscape(text_.substr(pos, 1)), "')")
                           : " (found the end of the text)";
    return absl::InvalidArgumentError(
        absl::StrCat("invalid JSON at byte ", pos, ": ", what, found));
  }

  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return text_[pos_]; }

  void SkipWhitespace() {
    while (!AtEnd() && (Peek() == ' ' || Peek() == '\t' || Peek() == '\n' || Peek() == '\r')) {
      ++pos_;
    }
  }

  bool ConsumeLiteral(absl::string_view literal) {
    if (text_.substr(pos_, literal.size()) != literal) return false;
    pos_ += literal.size();
    return true;
  }

  absl::StatusOr<JsonValue> ParseValue(int depth) {
    if (AtEnd()) return Error("expected a value");
    switch (Peek()) {
      case '{':
        return ParseObject(depth + 1);
      case '[':
        return ParseArray(depth + 1);
      case '"': {
        absl::StatusOr<std::string> text = ParseString();
        if (!text.ok()) return text.status();
        return JsonValue::String(*std::move(text));
      }
      case 't':
        if (ConsumeLiteral("true")) return JsonValue::Bool(true);
        break;
      case 'f':
        if (ConsumeLiteral("false")) return JsonValue::Bool(false);
        break;
      case 'n':
        if (ConsumeLiteral("null")) return JsonValue::Null();
        break;
      default:
        if (Peek() == '-' || IsDigit(Peek())) return ParseNumber();
        break;
    }
    return Error("expected a value");
  }

  absl::StatusOr<JsonValue> ParseObject(int depth) {
    if (depth > max_depth_)
      return Error(absl::StrCat("nesting deeper than ", max_depth_, " levels"));
    ++pos_;  // '{'
    std::vector<JsonValue::Member> members;
    std::unordered_set<std::string> keys;
    SkipWhitespace();
    if (!AtEnd() && Peek() == '}') {
      ++pos_;
      return JsonValue::Object(std::move(members));
    }
    while (true) {
      if (AtEnd() || Peek() != '"') return Error("expected a string key");
      size_t key_pos = pos_;
      absl::StatusOr<std::string> key = ParseString();
      if (!key.ok()) return key.status();
      if (!keys.insert(*key).second) {
        return absl::InvalidArgumentError(
            absl::StrCat("invalid JSON at byte ", key_pos, ": duplicate key \"",
                         absl::Utf8SafeCHexEscape(*key), "\" in an object"));
      }
      SkipWhitespace();
      if (AtEnd() || Peek() != ':') return Error("expected ':' after an object key");
      ++pos_;
      SkipWhitespace();
      absl::StatusOr<JsonValue> value = ParseValue(depth);
      if (!value.ok()) return value.status();
      members.emplace_back(*std::move(key), *std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("expected ',' or '}' in an object");
      if (Peek() == '}') {
        ++pos_;
        return JsonValue::Object(std::move(members));
      }
      if (Peek() != ',') return Error("expected ',' or '}' in an object");
      ++pos_;
      SkipWhitespace();
    }
  }

  absl::StatusOr<JsonValue> ParseArray(int depth) {
    if (depth > max_depth_)
      return Error(absl::StrCat("nesting deeper than ", max_depth_, " levels"));
    ++pos_;  // '['
    std::vector<JsonValue> elements;
    SkipWhitespace();
    if (!AtEnd() && Peek() == ']') {
      ++pos_;
      return JsonValue::Array(std::move(elements));
    }
    while (true) {
      absl::StatusOr<JsonValue> value = ParseValue(depth);
      if (!value.ok()) return value.status();
      elements.push_back(*std::move(value));
      SkipWhitespace();
      if (AtEnd()) return Error("expected ',' or ']' in an array");
      if (Peek() == ']') {
        ++pos_;
        return JsonValue::Array(std::move(elements));
      }
      if (Peek() != ',') return Error("expected ',' or ']' in an array");
      ++pos_;
      SkipWhitespace();
    }
  }

  // -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  absl::StatusOr<JsonValue> ParseNumber() {
    size_t start = pos_;
    if (Peek() == '-') ++pos_;
    if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit");
    if (Peek() == '0') {
      ++pos_;
      if (!AtEnd() && IsDigit(Peek())) return Error("leading zeros are not allowed in numbers");
    } else {
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    if (!AtEnd() && Peek() == '.') {
      ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit after '.'");
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    if (!AtEnd() && (Peek() == 'e' || Peek() == 'E')) {
      ++pos_;
      if (!AtEnd() && (Peek() == '+' || Peek() == '-')) ++pos_;
      if (AtEnd() || !IsDigit(Peek())) return Error("expected a digit in the exponent");
      while (!AtEnd() && IsDigit(Peek())) ++pos_;
    }
    return JsonValue::Number(std::string(text_.substr(start, pos_ - start)));
  }

  // Four hex digits at pos_.
  absl::StatusOr<uint32_t> ParseHex4() {
    uint32_t value = 0;
    for (int i = 0; i < 4; ++i) {
      if (AtEnd()) return Error("expected 4 hex digits after \\u");
      char c = Peek();
      uint32_t digit;
      if (c >= '0' && c <= '9') {
        digit = c - '0';
      } else if (c >= 'a' && c <= 'f') {
        digit = c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        digit = c - 'A' + 10;
      } else {
        return Error("expected 4 hex digits after \\u");
      }
      value = value * 16 + digit;
      ++pos_;
    }
    return value;
  }

  absl::StatusOr<std::string> ParseString() {
    ++pos_;  // '"'
    std::string out;
    while (true) {
      if (AtEnd()) return Error("unterminated string");
      unsigned char c = static_cast<unsigned char>(Peek());
      if (c == '"') {
        ++pos_;
        return out;
      }
      if (c < 0x20) return Error("control characters must be escaped in strings");
      if (c >= 0x80) {
        size_t length = Utf8SequenceLength(text_, pos_);
        if (length == 0) return Error("invalid UTF-8 in a string");
        out.append(text_.data() + pos_, length);
        pos_ += length;
        continue;
      }
      if (c != '\\') {
        out += static_cast<char>(c);
        ++pos_;
        continue;
      }
      size_t escape_pos = pos_;
      ++pos_;
      if (AtEnd()) return Error("unterminated escape sequence");
      char escape = Peek();
      ++pos_;
      switch (escape) {
        case '"':
          out += '"';
          break;
        case '\\':
          out += '\\';
          break;
        case '/':
          out += '/';
          break;
        case 'b':
          out += '\b';
          break;
        case 'f':
          out += '\f';
          break;
        case 'n':
          out += '\n';
          break;
        case 'r':
          out += '\r';
          break;
        case 't':
          out += '\t';
          break;
        case 'u': {
          absl::StatusOr<uint32_t> unit = ParseHex4();
          if (!unit.ok()) return unit.status();
          uint32_t code_point = *unit;
          if (code_point >= 0xDC00 && code_point <= 0xDFFF) {
            return ErrorAt(escape_pos, "unpaired low surrogate escape");
          }
          if (code_point >= 0xD800 && code_point <= 0xDBFF) {
            if (!ConsumeLiteral("\\u"))
              return ErrorAt(escape_pos, "unpaired high surrogate escape");
            absl::StatusOr<uint32_t> low = ParseHex4();
            if (!low.ok()) return low.status();
            if (*low < 0xDC00 || *low > 0xDFFF) {
              return ErrorAt(escape_pos, "unpaired high surrogate escape");
            }
            code_point = 0x10000 + ((code_point - 0xD800) << 10) + (*low - 0xDC00);
          }
          AppendUtf8(code_point, &out);
          break;
        }
        default:
          return ErrorAt(escape_pos, "invalid escape sequence");
      }
    }
  }

  absl::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
};

}  // namespace

JsonValue JsonValue::Bool(bool value) {
  JsonValue result;
  result.kind_ = Kind::kBool;
  result.bool_ = value;
  return result;
}

JsonValue JsonValue::Number(std::string text) {
  JsonValue result;
  result.kind_ = Kind::kNumber;
  result.text_ = std::move(text);
  return result;
}

JsonValue JsonValue::String(std::string value) {
  JsonValue result;
  result.kind_ = Kind::kString;
  result.text_ = std::move(value);
  return result;
}

JsonValue JsonValue::Array(std::vector<JsonValue> elements) {
  JsonValue result;
  result.kind_ = Kind::kArray;
  result.elements_ = std::move(elements);
  return result;
}

JsonValue JsonValue::Object(std::vector<Member> members) {
  JsonValue result;
  result.kind_ = Kind::kObject;
  result.members_ = std::move(members);
  return result;
}

const JsonValue* JsonValue::Find(absl::string_view key) const {
  for (const Member& member : members_) {
    if (member.first == key) return &member.second;
  }
  return nullptr;
}

std::optional<uint64_t> JsonValue::AsUint64() const {
  if (kind_ != Kind::kNumber || text_.empty()) return std::nullopt;
  uint64_t value = 0;
  for (char c : text_) {
    if (!IsDigit(c)) return std::nullopt;
    uint64_t digit = c - '0';
    if (value > (UINT64_MAX - digit) / 10) return std::nullopt;
    value = value * 10 + digit;
  }
  return value;
}

std::string JsonValue::Describe() const {
  switch (kind_) {
    case Kind::kNull:
      return "null";
    case Kind::kBool:
      return "a boolean";
    case Kind::kNumber:
      return absl::StrCat("the number ", text_);
    case Kind::kString:
      return "a string";
    case Kind::kArray:
      return "an array";
    case Kind::kObject:
      return "an object";
  }
  return "an unknown value";
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text, int max_depth) {
  return Parser(text, max_depth).ParseDocument();
}

bool IsValidUtf8(absl::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    size_t length = Utf8SequenceLength(text, pos);
    if (length == 0) return false;
    pos += length;
  }
  return true;
}

absl::Status AppendJsonString(absl::string_view text, std::string* out) {
  if (!IsValidUtf8(text)) {
    return absl::InvalidArgumentError(
        absl::StrCat("\"", absl::CHexEscape(text), "\" is not valid UTF-8"));
  }
  static constexpr char kHex[] = "0123456789abcdef";
  *out += '"';
  for (char c : text) {
    unsigned char byte = static_cast<unsigned char>(c);
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\b':
        *out += "\\b";
        break;
      case '\f':
        *out += "\\f";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (byte < 0x20) {
          *out += "\\u00";
          *out += kHex[byte >> 4];
          *out += kHex[byte & 0xF];
        } else {
          *out += c;
        }
        break;
    }
  }
  *out += '"';
  return absl::OkStatus();
}

}  // namespace loom::checkpoint
