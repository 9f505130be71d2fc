#ifndef LOOM_CORE_SAFETENSORS_H_
#define LOOM_CORE_SAFETENSORS_H_

// Checkpoints in the safetensors format: Checkpoint (tensors and metadata), the dtype mapping,
// writing a checkpoint whole or one tensor at a time (WriteSafetensors, WriteSafetensorsStreamed,
// SerializeSafetensors), reading one whole (ReadSafetensors, ParseSafetensors), and
// SafetensorsReader, which reads single tensors or windows of them. Defined in
// safetensors_writer.cc and safetensors_reader.cc, over safetensors_format.h and
// safetensors_header.h.

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/file_roots.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"

namespace loom::checkpoint {

// Checkpoints in the safetensors format (https://github.com/huggingface/safetensors):
//
//   8 bytes      N, the header length, a little-endian uint64
//   N bytes      the header: a UTF-8 JSON object, possibly padded with trailing spaces
//                  {"__metadata__": {"key": "value", ...},     (optional)
//                   "<tensor name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
//                   ...}
//   the rest     the data buffer: every tensor's bytes, row-major and little-endian;
//                data_offsets [begin, end) are relative to the start of the buffer, and the
//                tensors cover it exactly, with no gaps and no overlaps
//
// Data types: F32 <-> FLOAT32, I32 <-> INT32, I64 <-> INT64, U8 <-> UINT8, U16 <-> UINT16 and
// BF16 <-> BFLOAT16. Other safetensors dtypes (F16, F64, I8, BOOL, ...) are UNIMPLEMENTED.
//
// The writer lays files out as the reference implementation does, byte for byte: the tensors
// sorted by descending dtype alignment (I64, F32, I32, BF16, U16, U8), then by name; compact JSON
// with "__metadata__" first (keys sorted; left out when empty), then the tensors in data order,
// each as {"dtype":...,"shape":[...],"data_offsets":[b,e]}; the header padded with spaces to a
// multiple of 8 bytes, so every tensor's data is aligned to its element size.

struct Checkpoint {
  std::map<std::string, HostTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// The largest header the reader accepts and the writer produces, as in the reference
// implementation.
inline constexpr uint64_t kMaxSafetensorsHeaderSize = 100'000'000;

// "F32", ... for the six Loom data types; INVALID_ARGUMENT for DATA_TYPE_UNSPECIFIED.
absl::StatusOr<std::string> SafetensorsDtype(plan::DataType data_type);
// The Loom data type of a safetensors dtype: UNIMPLEMENTED for a safetensors dtype Loom lacks,
// INVALID_ARGUMENT for a string that is no safetensors dtype.
absl::StatusOr<plan::DataType> DataTypeFromSafetensors(absl::string_view dtype);

// Writes `checkpoint` to `path` atomically: into a new temporary file in the same directory,
// flushed to disk, then renamed over `path` (and the directory flushed), so `path` holds either
// its old contents or the whole new checkpoint, never a partial file. INVALID_ARGUMENT, naming the
// tensor, when a tensor has no data type, a negative dimension, or a byte count that does not
// match its shape and data type; when a name or metadata string is not valid UTF-8; for a tensor
// named "__metadata__"; or when the header would exceed kMaxSafetensorsHeaderSize. I/O errors carry
// their errno's code and name the path.
absl::Status WriteSafetensors(const std::string& path, const Checkpoint& checkpoint);

// What an atomic write does when a file is already where it writes.
enum class ExistingFile {
  kReplace,  // replaces it (rename)
  kKeep,     // keeps it and fails ALREADY_EXISTS naming it (renameat2 RENAME_NOREPLACE, or link)
};

// WriteSafetensors into `directory` (FileRoots::OpenForWriting) as directory.name(): the temporary
// file is created there with openat (O_EXCL | O_NOFOLLOW) and renamed relative to it, so no
// symbolic link is followed; a file already there is replaced or kept as `existing` says.
absl::Status WriteSafetensors(const WritableDirectory& directory, const Checkpoint& checkpoint,
                              ExistingFile existing);

// One tensor of a safetensors file as its header describes it.
struct SafetensorsTensorInfo {
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape shape;
};

// Gives the contents of tensor `name` (WriteSafetensorsStreamed asks for each once).
using TensorSource = std::function<absl::StatusOr<HostTensor>(const std::string& name)>;

// WriteSafetensors of a checkpoint too large to hold in memory: the file holds `tensors` (their
// types and shapes) and `metadata`, and `source` is asked for each tensor's contents in the file's
// data order, one at a time, so that only one is in memory at once. The file is byte for byte
// what WriteSafetensors writes for the same checkpoint, as atomically. An error of `source`, or a
// tensor it gives with another type or shape than `tensors` says (INVALID_ARGUMENT naming it),
// ends the write and leaves `path` as it was.
absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      const TensorSource& source);
// The same into `directory`, as WriteSafetensors above.
absl::Status WriteSafetensorsStreamed(const WritableDirectory& directory,
                                      const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      const TensorSource& source, ExistingFile existing);

// Reads a whole safetensors file. Every malformed file (it is user input) is an error naming the
// file and, where there is one, the tensor: INVALID_ARGUMENT for a truncated file, a header length
// past the end of the file or the limit, a header that is not strict JSON (duplicate keys
// included) or lacks fields or has fields of the wrong type, unknown fields in a tensor entry, a
// shape whose size overflows, data_offsets that are out of order, out of range, overlapping,
// leaving gaps or bytes after the last tensor, or not matching the shape and dtype;
// UNIMPLEMENTED for a dtype Loom lacks. Errors opening or reading the file carry their errno's
// code (NOT_FOUND, PERMISSION_DENIED, ...).
// Opened anywhere (FileRoots::Unrestricted); a file from FileRoots::OpenForReading with the
// overload below. A file truncated while it is read is DATA_LOSS naming it. No error contains a
// byte of a file that is no safetensors file, nor its size.
absl::StatusOr<Checkpoint> ReadSafetensors(const std::string& path);
absl::StatusOr<Checkpoint> ReadSafetensors(const ReadableFile& file);

// The same two on memory: the bytes WriteSafetensors would write, and the checkpoint in the bytes
// of a file; `source` names them in errors.
absl::StatusOr<std::string> SerializeSafetensors(const Checkpoint& checkpoint);
absl::StatusOr<Checkpoint> ParseSafetensors(absl::string_view contents,
                                            absl::string_view source = "<memory>");

// A safetensors file opened to read single tensors, or windows of them, without loading the rest:
// what a rank needs of a sharded checkpoint. Open reads and validates the whole header exactly as
// ReadSafetensors does (the same errors, and a file ReadSafetensors rejects is rejected here);
// the reads then fetch only the bytes asked for. The file stays open until the reader is
// destroyed. Not thread-safe.
class SafetensorsReader {
 public:
  // Opens `path` anywhere (FileRoots::Unrestricted).
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(const std::string& path);
  // Reads from `file` (FileRoots::OpenForReading), which it keeps open.
  static absl::StatusOr<std::unique_ptr<SafetensorsReader>> Open(ReadableFile file);

  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;
  ~SafetensorsReader();

  const std::string& path() const { return file_.path(); }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::map<std::string, SafetensorsTensorInfo>& tensors() const { return tensors_; }
  // The tensor `name`, or nullptr when the file has none of that name.
  const SafetensorsTensorInfo* Find(const std::string& name) const;

  // The whole tensor `name`: NOT_FOUND ("checkpoint '<path>' has no tensor '<name>'") when there
  // is none.
  absl::StatusOr<HostTensor> ReadTensor(const std::string& name);
  // The window [begin, begin + shape) of tensor `name`, as a dense row-major tensor of `shape`:
  // NOT_FOUND as above; INVALID_ARGUMENT, naming the tensor, when `begin` or `shape` has another
  // rank than the tensor or the window does not lie inside it. Reads one contiguous run of bytes
  // per row of the window (rows merged where the window spans whole inner axes).
  absl::StatusOr<HostTensor> ReadWindow(const std::string& name, absl::Span<const int64_t> begin,
                                        const Shape& shape);

 private:
  struct Location {
    uint64_t begin = 0;  // in the file
    uint64_t end = 0;
  };

  explicit SafetensorsReader(ReadableFile file);

  ReadableFile file_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, SafetensorsTensorInfo> tensors_;
  std::map<std::string, Location> locations_;
};

}  // namespace loom::checkpoint

#endif  // LOOM_CORE_SAFETENSORS_H_
