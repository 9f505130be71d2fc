#ifndef LOOM_CORE_SAFETENSORS_HEADER_H_
#define LOOM_CORE_SAFETENSORS_HEADER_H_

// Reading and validating a safetensors header: the length, the JSON, every tensor entry (dtype,
// shape, data_offsets) and the tiling of the data buffer by the tensors. ReadSafetensors,
// ParseSafetensors and SafetensorsReader::Open (safetensors.h) all read headers here, from a
// ByteSource (memory or a file), so that they accept and reject the same files with the same
// errors. Internal to the safetensors files of core/.

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom::checkpoint {

// Where a file's bytes come from: memory or a file descriptor.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly `length` bytes at `offset`; offset + length <= size().
  virtual absl::Status Read(uint64_t offset, void* out, size_t length) = 0;
};

// One tensor entry of a header, validated on its own.
struct Entry {
  std::string name;
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  std::string dtype;  // as written
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

// A validated header: the metadata, the tensor entries (sorted by data offsets) and where the
// data buffer starts in the file.
struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  uint64_t data_start = 0;
};

// Reads and validates the header of the file `file`; errors name the file as `name`.
absl::StatusOr<Header> ReadHeader(ByteSource& file, absl::string_view name);

}  // namespace loom::checkpoint

#endif  // LOOM_CORE_SAFETENSORS_HEADER_H_
