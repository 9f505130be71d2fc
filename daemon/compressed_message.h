#ifndef LOOM_DAEMON_COMPRESSED_MESSAGE_H_
#define LOOM_DAEMON_COMPRESSED_MESSAGE_H_

#include <string>

#include "absl/strings/string_view.h"
#include "google/protobuf/io/gzip_stream.h"
#include "google/protobuf/message.h"

namespace loom::daemon {

// `message` serialized and compressed with zlib (protobuf's GzipOutputStream, fastest level), for
// what the coordinator keeps of finished jobs: a plan compresses about 6x (its task, register and
// kernel names repeat), step events about 2x.
std::string CompressedMessage(const google::protobuf::Message& message);
// The compression CompressedMessage uses, for writers of their own (plan_response.h).
google::protobuf::io::GzipOutputStream::Options CompressedMessageOptions();

// Parses what CompressedMessage wrote into `message`; false when it does not decompress or parse.
bool ParseCompressedMessage(absl::string_view bytes, google::protobuf::Message* message);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_COMPRESSED_MESSAGE_H_
