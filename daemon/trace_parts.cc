#include "daemon/trace_parts.h"

#include <algorithm>

#include "absl/status/status.h"
#include "daemon/compressed_message.h"
#include "google/protobuf/wrappers.pb.h"

namespace loom::daemon {
namespace {

bool IsContinuationByte(char byte) { return (static_cast<unsigned char>(byte) & 0xC0) == 0x80; }

}  // namespace

size_t TracePartLength(absl::string_view window, int64_t max_bytes) {
  if (static_cast<int64_t>(window.size()) <= max_bytes) return window.size();
  size_t length = static_cast<size_t>(std::max<int64_t>(max_bytes, 1));
  while (length > 0 && IsContinuationByte(window[length])) --length;
  if (length > 0) return length;
  // A first character longer than max_bytes: it whole, so that the reader moves on.
  length = 1;
  while (length < window.size() && IsContinuationByte(window[length])) ++length;
  return length;
}

PackedTrace::PackedTrace(absl::string_view document, int64_t chunk_bytes)
    : total_bytes_(static_cast<int64_t>(document.size())), chunk_bytes_(chunk_bytes) {
  // BytesValue, not a string field: a chunk may end inside a character.
  google::protobuf::BytesValue chunk;
  for (size_t start = 0; start < document.size(); start += static_cast<size_t>(chunk_bytes)) {
    chunk.set_value(std::string(document.substr(start, static_cast<size_t>(chunk_bytes))));
    chunks_.push_back(CompressedMessage(chunk));
    packed_bytes_ += static_cast<int64_t>(chunks_.back().size());
  }
}

absl::StatusOr<std::string> PackedTrace::Read(int64_t offset, int64_t length) const {
  std::string bytes;
  // offset + length, which may be past int64_t for any offset a client sends, capped at the end.
  const int64_t end = length >= total_bytes_ - offset ? total_bytes_ : offset + length;
  if (offset >= end) return bytes;
  google::protobuf::BytesValue chunk;
  for (int64_t index = offset / chunk_bytes_; index * chunk_bytes_ < end; ++index) {
    if (!ParseCompressedMessage(chunks_[static_cast<size_t>(index)], &chunk)) {
      return absl::DataLossError("a chunk of the kept trace does not inflate");
    }
    const int64_t chunk_start = index * chunk_bytes_;
    const int64_t from = std::max(offset, chunk_start) - chunk_start;
    const int64_t to = std::min(end, chunk_start + chunk_bytes_) - chunk_start;
    bytes.append(chunk.value(), static_cast<size_t>(from), static_cast<size_t>(to - from));
  }
  return bytes;
}

}  // namespace loom::daemon
