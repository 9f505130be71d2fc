#ifndef LOOM_DAEMON_COMPRESSED_MESSAGE_H_
#define LOOM_DAEMON_COMPRESSED_MESSAGE_H_

// The zlib compression of protobuf messages that the coordinator uses for what it keeps of
// finished jobs: CompressedMessage and ParseCompressedMessage, and CompressedMessageOptions for
// writers that compress their own output. Packed events (packed_events.h), packed traces
// (trace_parts.h) and kept plans (plan_response.h) are written with it.

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/io/gzip_stream.h"
#include "google/protobuf/message.h"

namespace loom::daemon {

// `message` serialized and compressed with zlib (protobuf's GzipOutputStream, fastest level), for
// what the coordinator keeps of finished jobs. (Ratios and times: docs/ARCHITECTURE.md, "The
// cluster", *What the coordinator holds of its jobs*.)
std::string CompressedMessage(const google::protobuf::Message& message);
// The compression CompressedMessage uses, for writers of their own (plan_response.h).
google::protobuf::io::GzipOutputStream::Options CompressedMessageOptions();

// Parses what CompressedMessage wrote into `message`; false when it does not decompress or parse.
bool ParseCompressedMessage(absl::string_view bytes, google::protobuf::Message* message);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_COMPRESSED_MESSAGE_H_
