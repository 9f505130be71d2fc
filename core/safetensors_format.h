#ifndef LOOM_CORE_SAFETENSORS_FORMAT_H_
#define LOOM_CORE_SAFETENSORS_FORMAT_H_

// What the safetensors reader and writer (safetensors.h) share about the format itself: the
// little-endian uint64 header length, the reserved "__metadata__" key, the byte size of a tensor
// (with overflow checks), and how names are quoted in messages. The dtype mapping
// (SafetensorsDtype, DataTypeFromSafetensors) is declared in safetensors.h and defined beside
// these in safetensors_format.cc. Internal to the safetensors files of core/.

#include <bit>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace loom::checkpoint {

// Safetensors data is little-endian; tensors are written and read as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "the safetensors reader and writer assume a little-endian host");

inline constexpr size_t kLengthSize = 8;  // the uint64 header length
inline constexpr char kMetadataKey[] = "__metadata__";
inline constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// A name as it appears in messages: quoted, with control characters, quotes and invalid UTF-8
// escaped.
std::string Quote(absl::string_view text);

// The byte size of a tensor of `element_size`-byte elements and non-negative `dimensions`, or
// nullopt when it or any partial product of the dimensions exceeds 2^63 - 1, so that
// Shape::NumElements cannot overflow either. (Like the reference implementation, a zero dimension
// after an overflowing prefix does not save the shape.)
std::optional<uint64_t> TensorByteSize(absl::Span<const int64_t> dimensions, int64_t element_size);

// The header length: kLengthSize bytes, little-endian.
uint64_t DecodeUint64(const unsigned char* bytes);
void EncodeUint64(uint64_t value, std::string* out);

}  // namespace loom::checkpoint

#endif  // LOOM_CORE_SAFETENSORS_FORMAT_H_
