#include "kernels/cpu/data/token_reading.h"

#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"

namespace loom::cpu {

absl::StatusOr<TokenFormat> ParseTokenFormat(absl::string_view name) {
  if (name == "bytes") return TokenFormat::kBytes;
  if (name == "uint16") return TokenFormat::kUint16;
  if (name == "uint32") return TokenFormat::kUint32;
  return absl::InvalidArgumentError(
      absl::StrCat("'format' must be \"bytes\", \"uint16\" or \"uint32\", got \"", name, "\""));
}

absl::string_view TokenFormatName(TokenFormat format) {
  switch (format) {
    case TokenFormat::kUint16:
      return "uint16";
    case TokenFormat::kUint32:
      return "uint32";
    default:
      return "bytes";
  }
}

int64_t TokenWidth(TokenFormat format) {
  switch (format) {
    case TokenFormat::kUint16:
      return 2;
    case TokenFormat::kUint32:
      return 4;
    default:
      return 1;
  }
}

absl::StatusOr<int64_t> CountTokens(const ReadableFile& file, TokenFormat format) {
  if (file.size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", file.path(), "' is empty"));
  }
  if (file.size() % TokenWidth(format) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file '", file.path(), "' has ", file.size(),
        " bytes, which is not a whole number of ", TokenFormatName(format), " tokens"));
  }
  return file.size() / TokenWidth(format);
}

template <typename T>
absl::Status ReadTokens(const ReadableFile& file, TokenFormat format, int64_t begin, int64_t count,
                        T* output, std::string& buffer, const std::atomic<bool>* ending) {
  const int64_t width = TokenWidth(format);
  buffer.resize(static_cast<size_t>(count * width));
  if (absl::Status status =
          file.ReadAt(begin * width, absl::Span<char>(buffer.data(), buffer.size()), ending);
      !status.ok()) {
    return status;
  }
  const auto* bytes = reinterpret_cast<const uint8_t*>(buffer.data());
  if (format == TokenFormat::kBytes) {
    for (int64_t k = 0; k < count; ++k) output[k] = static_cast<T>(bytes[k]);
  } else if (format == TokenFormat::kUint16) {
    for (int64_t k = 0; k < count; ++k) {
      output[k] = static_cast<T>(static_cast<uint32_t>(bytes[2 * k]) |
                                 (static_cast<uint32_t>(bytes[2 * k + 1]) << 8));
    }
  } else {
    for (int64_t k = 0; k < count; ++k) {
      const uint32_t token = static_cast<uint32_t>(bytes[4 * k]) |
                             (static_cast<uint32_t>(bytes[4 * k + 1]) << 8) |
                             (static_cast<uint32_t>(bytes[4 * k + 2]) << 16) |
                             (static_cast<uint32_t>(bytes[4 * k + 3]) << 24);
      if (token > static_cast<uint32_t>(std::numeric_limits<T>::max())) {
        return absl::InvalidArgumentError(
            absl::StrCat("token file '", file.path(), "' holds token ", token, " at token ",
                         begin + k, ", beyond the output's integer type"));
      }
      output[k] = static_cast<T>(token);
    }
  }
  return absl::OkStatus();
}

template absl::Status ReadTokens<int32_t>(const ReadableFile&, TokenFormat, int64_t, int64_t,
                                          int32_t*, std::string&, const std::atomic<bool>*);
template absl::Status ReadTokens<int64_t>(const ReadableFile&, TokenFormat, int64_t, int64_t,
                                          int64_t*, std::string&, const std::atomic<bool>*);

}  // namespace loom::cpu
