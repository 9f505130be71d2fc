#include "daemon/compressed_message.h"

#include <zlib.h>

#include <limits>

#include "google/protobuf/io/gzip_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace loom::daemon {

using google::protobuf::io::ArrayInputStream;
using google::protobuf::io::GzipInputStream;
using google::protobuf::io::GzipOutputStream;
using google::protobuf::io::StringOutputStream;

GzipOutputStream::Options CompressedMessageOptions() {
  GzipOutputStream::Options options;
  options.format = GzipOutputStream::ZLIB;
  options.compression_level = 1;
  return options;
}

std::string CompressedMessage(const google::protobuf::Message& message) {
  std::string bytes;
  {
    StringOutputStream output(&bytes);
    GzipOutputStream compressed(&output, CompressedMessageOptions());
    // Writing to a string fails only when memory runs out, which ends the process anyway.
    message.SerializeToZeroCopyStream(&compressed);
    compressed.Close();
  }
  bytes.shrink_to_fit();
  return bytes;
}

bool ParseCompressedMessage(absl::string_view bytes, google::protobuf::Message* message) {
  if (bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max())) return false;
  ArrayInputStream input(bytes.data(), static_cast<int>(bytes.size()));
  GzipInputStream decompressed(&input, GzipInputStream::ZLIB);
  // A stream cut short or damaged ends early without an error of its own (what was inflated may
  // even parse): only a stream that reached its end, checksum verified, is whole.
  return message->ParseFromZeroCopyStream(&decompressed) &&
         decompressed.ZlibErrorCode() == Z_STREAM_END;
}

}  // namespace loom::daemon
