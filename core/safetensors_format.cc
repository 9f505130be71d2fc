#include "core/safetensors_format.h"

#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/json.h"
#include "core/safetensors.h"

namespace loom::checkpoint {
namespace {

// Every dtype of the safetensors specification, so that the reader can tell an unsupported one
// (UNIMPLEMENTED) from a string that is no dtype at all (INVALID_ARGUMENT).
constexpr const char* kKnownDtypes[] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64"};

constexpr plan::DataType kSupportedTypes[] = {plan::FLOAT32, plan::INT32,  plan::INT64,
                                              plan::UINT8,   plan::UINT16, plan::BFLOAT16};

}  // namespace

std::string Quote(absl::string_view text) {
  // Utf8SafeCHexEscape keeps valid UTF-8 readable but would pass invalid bytes through.
  return absl::StrCat(
      "'", IsValidUtf8(text) ? absl::Utf8SafeCHexEscape(text) : absl::CHexEscape(text), "'");
}

std::optional<uint64_t> TensorByteSize(absl::Span<const int64_t> dimensions, int64_t element_size) {
  uint64_t elements = 1;
  for (int64_t dimension : dimensions) {
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dimension), &elements) ||
        elements > kMaxInt64) {
      return std::nullopt;
    }
  }
  uint64_t size = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(element_size), &size) ||
      size > kMaxInt64) {
    return std::nullopt;
  }
  return size;
}

uint64_t DecodeUint64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = kLengthSize - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void EncodeUint64(uint64_t value, std::string* out) {
  for (size_t i = 0; i < kLengthSize; ++i) *out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

absl::StatusOr<std::string> SafetensorsDtype(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
      return std::string("F32");
    case plan::INT32:
      return std::string("I32");
    case plan::INT64:
      return std::string("I64");
    case plan::UINT8:
      return std::string("U8");
    case plan::UINT16:
      return std::string("U16");
    case plan::BFLOAT16:
      return std::string("BF16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no safetensors dtype for data type ", DataTypeName(data_type)));
  }
}

absl::StatusOr<plan::DataType> DataTypeFromSafetensors(absl::string_view dtype) {
  for (plan::DataType data_type : kSupportedTypes) {
    if (*SafetensorsDtype(data_type) == dtype) return data_type;
  }
  std::vector<std::string> supported;
  for (plan::DataType data_type : kSupportedTypes) {
    supported.push_back(*SafetensorsDtype(data_type));
  }
  std::string supported_text = absl::StrJoin(supported, ", ");
  for (const char* known : kKnownDtypes) {
    if (dtype == known) {
      return absl::UnimplementedError(absl::StrCat(
          "dtype ", dtype, " is not supported by Loom (supported: ", supported_text, ")"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", Quote(dtype), " (Loom reads ", supported_text, ")"));
}

}  // namespace loom::checkpoint
