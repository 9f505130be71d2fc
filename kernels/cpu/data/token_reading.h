#ifndef LOOM_KERNELS_CPU_DATA_TOKEN_READING_H_
#define LOOM_KERNELS_CPU_DATA_TOKEN_READING_H_

// Token files as nanoGPT and Megatron write them: the formats (one byte, little-endian uint16 or
// uint32 per token), and ReadTokens, which reads a run of tokens from a file with pread into int32
// or int64 ids. Shared by the "token_batch" and "token_dataset" kernels.

#include <atomic>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/file_roots.h"

namespace loom::cpu {

enum class TokenFormat { kBytes, kUint16, kUint32 };

// "bytes", "uint16" or "uint32"; INVALID_ARGUMENT quoting `name` otherwise.
absl::StatusOr<TokenFormat> ParseTokenFormat(absl::string_view name);
absl::string_view TokenFormatName(TokenFormat format);
// Bytes per token.
int64_t TokenWidth(TokenFormat format);

// The tokens in `file` (opened with `format`): INVALID_ARGUMENT naming the file when it is empty
// or its size is not a whole number of tokens.
absl::StatusOr<int64_t> CountTokens(const ReadableFile& file, TokenFormat format);

// Tokens [begin, begin + count) of `file` into `output`, read through `buffer` (the caller keeps
// them within the file as it was opened). DATA_LOSS naming the file when it was truncated since;
// CANCELLED once `ending` is set; INVALID_ARGUMENT naming the file and position for a uint32 token
// beyond T. Instantiated for int32_t and int64_t.
template <typename T>
absl::Status ReadTokens(const ReadableFile& file, TokenFormat format, int64_t begin, int64_t count,
                        T* output, std::string& buffer, const std::atomic<bool>* ending);

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_TOKEN_READING_H_
