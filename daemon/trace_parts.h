#ifndef LOOM_DAEMON_TRACE_PARTS_H_
#define LOOM_DAEMON_TRACE_PARTS_H_

// A finished job's Chrome trace in parts: TracePartLength cuts a part where a UTF-8 character ends
// (the coordinator's GetTrace parts, and the parts a node sends its trace in), and PackedTrace
// holds the document in compressed chunks when the coordinator has no data directory, so that
// reading a part inflates only the chunks it overlaps.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace loom::daemon {

// A finished job's Chrome trace is read in parts (GetTraceRequest.offset and max_bytes): a trace
// may be larger than a gRPC message.

// How many bytes of `window` (the document's bytes from a part's offset, max_bytes + 1 of them
// unless the document ends sooner) the part takes: all of them when there are at most
// `max_bytes` (> 0), else the longest prefix of at most `max_bytes` that ends where a UTF-8
// character does (a proto string holds whole characters), or the first character when even that
// is longer.
size_t TracePartLength(absl::string_view window, int64_t max_bytes);

// The trace as the coordinator keeps it without a data directory: the JSON document in
// compressed chunks, so that a part is read by inflating only the chunks it overlaps. (Sizes:
// docs/ARCHITECTURE.md, "The cluster", *What the coordinator holds of its jobs*.)
class PackedTrace {
 public:
  static constexpr int64_t kDefaultChunkBytes = 4 << 20;
  explicit PackedTrace(absl::string_view document, int64_t chunk_bytes = kDefaultChunkBytes);

  int64_t total_bytes() const { return total_bytes_; }
  // What the compressed chunks take.
  int64_t packed_bytes() const { return packed_bytes_; }
  // The document's bytes [offset, offset + length), fewer at its end (none from its end on).
  // DATA_LOSS when a chunk does not inflate.
  absl::StatusOr<std::string> Read(int64_t offset, int64_t length) const;

 private:
  int64_t total_bytes_ = 0;
  int64_t packed_bytes_ = 0;
  int64_t chunk_bytes_ = kDefaultChunkBytes;
  std::vector<std::string> chunks_;  // chunk i: bytes [i * chunk_bytes_, (i + 1) * chunk_bytes_)
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_TRACE_PARTS_H_
