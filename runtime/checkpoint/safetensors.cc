#include "runtime/checkpoint/safetensors.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "runtime/checkpoint/json.h"
#include "runtime/data_type.h"

namespace loom::checkpoint {
namespace {

// Safetensors data is little-endian; tensors are written and read as they lie in memory.
static_assert(std::endian::native == std::endian::little,
              "the safetensors reader and writer assume a little-endian host");

constexpr size_t kLengthSize = 8;  // the uint64 header length
constexpr char kMetadataKey[] = "__metadata__";
constexpr uint64_t kMaxInt64 = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// The writer buffers small writes up to this size; larger tensors are written directly.
constexpr size_t kWriteBufferSize = size_t{1} << 20;

// Every dtype of the safetensors specification, so that the reader can tell an unsupported one
// (UNIMPLEMENTED) from a string that is no dtype at all (INVALID_ARGUMENT).
constexpr const char* kKnownDtypes[] = {
    "BOOL",    "F4",          "F6_E2M3",     "F6_E3M2", "U8",  "I8",  "F8_E5M2", "F8_E4M3",
    "F8_E8M0", "F8_E4M3FNUZ", "F8_E5M2FNUZ", "I16",     "U16", "F16", "BF16",    "I32",
    "U32",     "F32",         "C64",         "F64",     "I64", "U64"};

constexpr plan::DataType kSupportedTypes[] = {plan::FLOAT32, plan::INT32,  plan::INT64,
                                              plan::UINT8,   plan::UINT16, plan::BFLOAT16};

// The writer's order: descending alignment, as the reference implementation sorts its dtypes
// (U8 < U16 < BF16 < I32 < F32 < I64 in its enum).
int AlignmentRank(plan::DataType data_type) {
  switch (data_type) {
    case plan::UINT8:
      return 0;
    case plan::UINT16:
      return 1;
    case plan::BFLOAT16:
      return 2;
    case plan::INT32:
      return 3;
    case plan::FLOAT32:
      return 4;
    case plan::INT64:
      return 5;
    default:
      return -1;
  }
}

// A name as it appears in messages: quoted, with control characters, quotes and invalid UTF-8
// escaped.
std::string Quote(absl::string_view text) {
  // Utf8SafeCHexEscape keeps valid UTF-8 readable but would pass invalid bytes through.
  return absl::StrCat(
      "'", IsValidUtf8(text) ? absl::Utf8SafeCHexEscape(text) : absl::CHexEscape(text), "'");
}

// The byte size of a tensor of `element_size`-byte elements and non-negative `dimensions`, or
// nullopt when it or any partial product of the dimensions exceeds 2^63 - 1, so that
// Shape::NumElements cannot overflow either. (Like the reference implementation, a zero dimension
// after an overflowing prefix does not save the shape.)
std::optional<uint64_t> TensorByteSize(absl::Span<const int64_t> dimensions, int64_t element_size) {
  uint64_t elements = 1;
  for (int64_t dimension : dimensions) {
    if (__builtin_mul_overflow(elements, static_cast<uint64_t>(dimension), &elements) ||
        elements > kMaxInt64) {
      return std::nullopt;
    }
  }
  uint64_t size = 0;
  if (__builtin_mul_overflow(elements, static_cast<uint64_t>(element_size), &size) ||
      size > kMaxInt64) {
    return std::nullopt;
  }
  return size;
}

uint64_t DecodeUint64(const unsigned char* bytes) {
  uint64_t value = 0;
  for (int i = kLengthSize - 1; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

void EncodeUint64(uint64_t value, std::string* out) {
  for (size_t i = 0; i < kLengthSize; ++i) *out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

// ---------------------------------------------------------------------------------------------
// Reading.

// Where a file's bytes come from: memory or a file descriptor.
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  virtual uint64_t size() const = 0;
  // Reads exactly `length` bytes at `offset`; offset + length <= size().
  virtual absl::Status Read(uint64_t offset, void* out, size_t length) = 0;
};

class MemorySource : public ByteSource {
 public:
  explicit MemorySource(absl::string_view contents) : contents_(contents) {}
  uint64_t size() const override { return contents_.size(); }
  absl::Status Read(uint64_t offset, void* out, size_t length) override {
    if (length > 0) std::memcpy(out, contents_.data() + offset, length);
    return absl::OkStatus();
  }

 private:
  absl::string_view contents_;
};

class FileSource : public ByteSource {
 public:
  FileSource(int fd, uint64_t size, absl::string_view path) : fd_(fd), size_(size), path_(path) {}
  uint64_t size() const override { return size_; }
  absl::Status Read(uint64_t offset, void* out, size_t length) override {
    char* destination = static_cast<char*>(out);
    while (length > 0) {
      ssize_t count = ::pread(fd_, destination, length, static_cast<off_t>(offset));
      if (count < 0) {
        if (errno == EINTR) continue;
        return absl::ErrnoToStatus(errno, absl::StrCat("cannot read ", Quote(path_)));
      }
      if (count == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(Quote(path_), ": the file ended at byte ", offset, " while being read (",
                         size_, " bytes when opened); was it truncated meanwhile?"));
      }
      destination += count;
      offset += count;
      length -= count;
    }
    return absl::OkStatus();
  }

 private:
  int fd_;
  uint64_t size_;
  absl::string_view path_;
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

std::string OffsetsText(const Entry& entry) {
  return absl::StrCat("[", entry.begin, ", ", entry.end, "]");
}

// Errors below name the file (`source`, already quoted) and the tensor.
absl::Status Invalid(absl::string_view source, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": ", message));
}

absl::StatusOr<uint64_t> NonNegativeInteger(const JsonValue& value, absl::string_view source,
                                            absl::string_view what) {
  std::optional<uint64_t> integer = value.AsUint64();
  if (!integer.has_value()) {
    return Invalid(source, absl::StrCat(what, " must be a non-negative integer below 2^64, not ",
                                        value.Describe()));
  }
  return *integer;
}

absl::StatusOr<Entry> ParseEntry(const std::string& name, const JsonValue& value,
                                 absl::string_view source, uint64_t buffer_size) {
  Entry entry;
  entry.name = name;
  std::string tensor = absl::StrCat("tensor ", Quote(name));
  if (!value.is_object()) {
    return Invalid(source, absl::StrCat("the header entry of ", tensor, " must be an object, not ",
                                        value.Describe()));
  }
  for (const JsonValue::Member& member : value.members()) {
    if (member.first != "dtype" && member.first != "shape" && member.first != "data_offsets") {
      return Invalid(source, absl::StrCat(tensor, " has an unknown field ", Quote(member.first),
                                          " (expected dtype, shape and data_offsets)"));
    }
  }
  const JsonValue* dtype = value.Find("dtype");
  const JsonValue* shape = value.Find("shape");
  const JsonValue* offsets = value.Find("data_offsets");
  for (auto [field, field_name] :
       {std::pair{dtype, "dtype"}, std::pair{shape, "shape"}, std::pair{offsets, "data_offsets"}}) {
    if (field == nullptr) {
      return Invalid(source, absl::StrCat(tensor, " lacks the field ", field_name));
    }
  }

  // dtype.
  if (!dtype->is_string()) {
    return Invalid(source, absl::StrCat("the dtype of ", tensor, " must be a string, not ",
                                        dtype->Describe()));
  }
  entry.dtype = dtype->string_value();
  absl::StatusOr<plan::DataType> data_type = DataTypeFromSafetensors(entry.dtype);
  if (!data_type.ok()) {
    return absl::Status(data_type.status().code(),
                        absl::StrCat(source, ": ", tensor, ": ", data_type.status().message()));
  }
  entry.data_type = *data_type;

  // shape, and the size it implies.
  if (!shape->is_array()) {
    return Invalid(source, absl::StrCat("the shape of ", tensor, " must be an array, not ",
                                        shape->Describe()));
  }
  std::vector<int64_t> dimensions;
  for (size_t i = 0; i < shape->elements().size(); ++i) {
    absl::StatusOr<uint64_t> dimension = NonNegativeInteger(
        shape->elements()[i], source, absl::StrCat("shape[", i, "] of ", tensor));
    if (!dimension.ok()) return dimension.status();
    if (*dimension > kMaxInt64) {
      return Invalid(source, absl::StrCat("shape[", i, "] of ", tensor, " is ", *dimension,
                                          ", more than 2^63 - 1"));
    }
    dimensions.push_back(static_cast<int64_t>(*dimension));
  }
  entry.shape = Shape(dimensions);
  std::optional<uint64_t> byte_size = TensorByteSize(dimensions, DataTypeSize(entry.data_type));
  if (!byte_size.has_value()) {
    return Invalid(source, absl::StrCat(tensor, " has shape ", entry.shape.ToString(),
                                        ", whose size in bytes exceeds 2^63 - 1"));
  }

  // data_offsets.
  if (!offsets->is_array() || offsets->elements().size() != 2) {
    std::string found = offsets->is_array()
                            ? absl::StrCat("an array of ", offsets->elements().size())
                            : offsets->Describe();
    return Invalid(source,
                   absl::StrCat("the data_offsets of ", tensor,
                                " must be an array of 2 integers [begin, end], not ", found));
  }
  absl::StatusOr<uint64_t> begin = NonNegativeInteger(offsets->elements()[0], source,
                                                      absl::StrCat("data_offsets[0] of ", tensor));
  if (!begin.ok()) return begin.status();
  absl::StatusOr<uint64_t> end = NonNegativeInteger(offsets->elements()[1], source,
                                                    absl::StrCat("data_offsets[1] of ", tensor));
  if (!end.ok()) return end.status();
  entry.begin = *begin;
  entry.end = *end;
  if (entry.end < entry.begin) {
    return Invalid(source, absl::StrCat("the data_offsets ", OffsetsText(entry), " of ", tensor,
                                        " end before they begin"));
  }
  if (entry.end - entry.begin != *byte_size) {
    return Invalid(
        source, absl::StrCat(tensor, " is ", entry.dtype, entry.shape.ToString(), ", ", *byte_size,
                             " bytes, but its data_offsets ", OffsetsText(entry), " span ",
                             entry.end - entry.begin, " bytes"));
  }
  if (entry.end > buffer_size) {
    return Invalid(source, absl::StrCat("the data_offsets ", OffsetsText(entry), " of ", tensor,
                                        " run past the end of the data, which has ", buffer_size,
                                        " bytes (is the file truncated?)"));
  }
  return entry;
}

// A validated header: the metadata, the tensor entries (sorted by data offsets) and where the
// data buffer starts in the file.
struct Header {
  std::map<std::string, std::string> metadata;
  std::vector<Entry> entries;
  uint64_t data_start = 0;
};

absl::StatusOr<Header> ReadHeader(ByteSource& file, absl::string_view name) {
  std::string source = Quote(name);
  uint64_t file_size = file.size();
  if (file_size < kLengthSize) {
    return Invalid(source, absl::StrCat("the file is truncated: it has ", file_size,
                                        " bytes, fewer than the 8 of the header length"));
  }
  unsigned char length_bytes[kLengthSize];
  if (absl::Status status = file.Read(0, length_bytes, kLengthSize); !status.ok()) return status;
  uint64_t header_size = DecodeUint64(length_bytes);
  if (header_size > file_size - kLengthSize) {
    return Invalid(
        source, absl::StrCat("the header length ", header_size,
                             " runs past the end of the file, which has ", file_size - kLengthSize,
                             " bytes after the length (is the file truncated?)"));
  }
  if (header_size > kMaxSafetensorsHeaderSize) {
    return Invalid(source, absl::StrCat("the header length ", header_size, " exceeds the limit of ",
                                        kMaxSafetensorsHeaderSize, " bytes"));
  }
  std::string header(header_size, '\0');
  if (absl::Status status = file.Read(kLengthSize, header.data(), header.size()); !status.ok()) {
    return status;
  }
  absl::StatusOr<JsonValue> json = ParseJson(header);
  if (!json.ok()) {
    return Invalid(source, absl::StrCat("bad header: ", json.status().message()));
  }
  if (!json->is_object()) {
    return Invalid(source,
                   absl::StrCat("the header must be a JSON object, not ", json->Describe()));
  }

  Header result;
  result.data_start = kLengthSize + header_size;
  const uint64_t buffer_size = file_size - result.data_start;
  std::vector<Entry>& entries = result.entries;
  for (const auto& [key, value] : json->members()) {
    if (key == kMetadataKey) {
      if (!value.is_object()) {
        return Invalid(source,
                       absl::StrCat("__metadata__ must be an object, not ", value.Describe()));
      }
      for (const auto& [metadata_key, metadata_value] : value.members()) {
        if (!metadata_value.is_string()) {
          return Invalid(
              source, absl::StrCat("__metadata__ values must be strings, but ", Quote(metadata_key),
                                   " is ", metadata_value.Describe()));
        }
        result.metadata.emplace(metadata_key, metadata_value.string_value());
      }
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(key, value, source, buffer_size);
    if (!entry.ok()) return entry.status();
    entries.push_back(*std::move(entry));
  }

  // The tensors must tile the data buffer: sorted by offsets, each begins where the last ended.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  uint64_t covered = 0;
  const Entry* previous = nullptr;
  for (const Entry& entry : entries) {
    if (entry.begin < covered) {
      return Invalid(source, absl::StrCat("the data_offsets ", OffsetsText(entry), " of tensor ",
                                          Quote(entry.name), " overlap those of tensor ",
                                          Quote(previous->name), ", ", OffsetsText(*previous)));
    }
    if (entry.begin > covered) {
      return Invalid(source, absl::StrCat("bytes [", covered, ", ", entry.begin,
                                          ") of the data belong to no tensor (tensor ",
                                          Quote(entry.name), " begins at ", entry.begin, ")"));
    }
    covered = entry.end;
    previous = &entry;
  }
  if (covered != buffer_size) {
    return Invalid(source, absl::StrCat("the last ", buffer_size - covered, " of the ", buffer_size,
                                        " bytes of data belong to no tensor"));
  }
  return result;
}

absl::StatusOr<Checkpoint> ReadFrom(ByteSource& file, absl::string_view name) {
  absl::StatusOr<Header> header = ReadHeader(file, name);
  if (!header.ok()) return header.status();
  const uint64_t data_start = header->data_start;
  Checkpoint checkpoint;
  checkpoint.metadata = std::move(header->metadata);
  for (const Entry& entry : header->entries) {
    HostTensor tensor;
    tensor.data_type = entry.data_type;
    tensor.shape = entry.shape;
    tensor.bytes.resize(entry.end - entry.begin);
    if (absl::Status status =
            file.Read(data_start + entry.begin, tensor.bytes.data(), tensor.bytes.size());
        !status.ok()) {
      return status;
    }
    checkpoint.tensors.emplace(entry.name, std::move(tensor));
  }
  return checkpoint;
}

// ---------------------------------------------------------------------------------------------
// Writing.

// The length and padded header, and the tensors' names in data order with their byte sizes.
struct Layout {
  std::string prefix;
  std::vector<std::pair<std::string, uint64_t>> order;
};

// The layout of a file holding `tensors` (their data types and shapes) and `metadata`.
absl::StatusOr<Layout> PlanLayout(const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                  const std::map<std::string, std::string>& metadata) {
  Layout layout;
  for (const auto& [name, tensor] : tensors) {
    std::string what = absl::StrCat("tensor ", Quote(name));
    if (name == kMetadataKey) {
      return absl::InvalidArgumentError(
          "a tensor cannot be named __metadata__: the safetensors header reserves that key");
    }
    if (!IsValidUtf8(name)) {
      return absl::InvalidArgumentError(
          absl::StrCat("the name of ", what, " is not valid UTF-8, which JSON cannot hold"));
    }
    if (AlignmentRank(tensor.data_type) < 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, " has data type ",
                                                     DataTypeName(tensor.data_type),
                                                     ", which safetensors cannot store"));
    }
    for (int64_t dimension : tensor.shape.dimensions()) {
      if (dimension < 0) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has a negative dimension: shape ", tensor.shape.ToString()));
      }
    }
    std::optional<uint64_t> bytes =
        TensorByteSize(tensor.shape.dimensions(), DataTypeSize(tensor.data_type));
    if (!bytes.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " has shape ", tensor.shape.ToString(), ", too large to store"));
    }
    layout.order.emplace_back(name, *bytes);
  }
  // Names are already sorted within a rank: the map is ordered bytewise.
  std::stable_sort(layout.order.begin(), layout.order.end(), [&](const auto& a, const auto& b) {
    return AlignmentRank(tensors.at(a.first).data_type) >
           AlignmentRank(tensors.at(b.first).data_type);
  });

  std::string header = "{";
  if (!metadata.empty()) {
    header += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : metadata) {
      if (!first) header += ',';
      first = false;
      absl::Status status = AppendJsonString(key, &header);
      if (status.ok()) {
        header += ':';
        status = AppendJsonString(value, &header);
      }
      if (!status.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("metadata entry ", Quote(key), ": ", status.message()));
      }
    }
    header += "}";
  }
  uint64_t offset = 0;
  for (const auto& [name, bytes] : layout.order) {
    const SafetensorsTensorInfo& tensor = tensors.at(name);
    if (header.size() > 1) header += ',';
    absl::Status status = AppendJsonString(name, &header);
    if (!status.ok()) return status;  // IsValidUtf8 was checked above
    uint64_t end = offset + bytes;
    absl::StrAppend(&header, ":{\"dtype\":\"", *SafetensorsDtype(tensor.data_type),
                    "\",\"shape\":[", absl::StrJoin(tensor.shape.dimensions(), ","),
                    "],\"data_offsets\":[", offset, ",", end, "]}");
    offset = end;
  }
  header += '}';
  header.append((kLengthSize - header.size() % kLengthSize) % kLengthSize, ' ');
  if (header.size() > kMaxSafetensorsHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("the safetensors header would have ",
                                                   header.size(), " bytes, more than the limit of ",
                                                   kMaxSafetensorsHeaderSize));
  }
  layout.prefix.reserve(kLengthSize + header.size());
  EncodeUint64(header.size(), &layout.prefix);
  layout.prefix += header;
  return layout;
}

// The layout of `checkpoint`, whose tensors must hold the bytes their shapes and types say.
absl::StatusOr<Layout> PlanLayout(const Checkpoint& checkpoint) {
  std::map<std::string, SafetensorsTensorInfo> tensors;
  for (const auto& [name, tensor] : checkpoint.tensors) {
    tensors[name] = SafetensorsTensorInfo{tensor.data_type, tensor.shape};
  }
  absl::StatusOr<Layout> layout = PlanLayout(tensors, checkpoint.metadata);
  if (!layout.ok()) return layout;
  for (const auto& [name, bytes] : layout->order) {
    const HostTensor& tensor = checkpoint.tensors.at(name);
    if (tensor.bytes.size() != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tensor ", Quote(name), " is ", DataTypeName(tensor.data_type), tensor.shape.ToString(),
          ", ", bytes, " bytes, but holds ", tensor.bytes.size(), " bytes"));
    }
  }
  return layout;
}

// The bytes of tensor `name` (valid until the next call).
using TensorBytes = std::function<absl::StatusOr<absl::Span<const std::byte>>(const std::string&)>;

TensorBytes BytesOf(const Checkpoint& checkpoint) {
  return [&checkpoint](const std::string& name) -> absl::StatusOr<absl::Span<const std::byte>> {
    return absl::MakeConstSpan(checkpoint.tensors.at(name).bytes);
  };
}

// Writes all of `data` to `fd`, retrying short writes.
absl::Status WriteAll(int fd, const char* data, size_t length, absl::string_view path) {
  while (length > 0) {
    ssize_t count = ::write(fd, data, length);
    if (count < 0) {
      if (errno == EINTR) continue;
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot write ", Quote(path)));
    }
    data += count;
    length -= count;
  }
  return absl::OkStatus();
}

absl::Status WriteLayout(int fd, const Layout& layout, const TensorBytes& bytes_of,
                         absl::string_view path) {
  std::string buffer = layout.prefix;
  for (const auto& [name, size] : layout.order) {
    absl::StatusOr<absl::Span<const std::byte>> bytes = bytes_of(name);
    if (!bytes.ok()) return bytes.status();
    if (bytes->size() != size) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", Quote(name), " has ", bytes->size(),
                                                     " bytes, not the ", size,
                                                     " its data type and shape take"));
    }
    const char* data = reinterpret_cast<const char*>(bytes->data());
    if (buffer.size() + bytes->size() <= kWriteBufferSize) {
      buffer.append(data, bytes->size());
      continue;
    }
    if (absl::Status status = WriteAll(fd, buffer.data(), buffer.size(), path); !status.ok()) {
      return status;
    }
    buffer.clear();
    if (bytes->size() >= kWriteBufferSize) {
      if (absl::Status status = WriteAll(fd, data, bytes->size(), path); !status.ok()) {
        return status;
      }
    } else {
      buffer.append(data, bytes->size());
    }
  }
  return WriteAll(fd, buffer.data(), buffer.size(), path);
}

// Flushes the directory holding `path`, so that a rename into it is durable.
absl::Status SyncParentDirectory(const std::string& path) {
  std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string directory = parent.empty() ? std::string(".") : parent.string();
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open directory ", Quote(directory)));
  }
  absl::Status status;
  // EINVAL: the file system cannot sync directories; nothing more can be done.
  if (::fsync(fd) != 0 && errno != EINVAL) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot sync directory ", Quote(directory)));
  }
  ::close(fd);
  return status;
}

// A regular file opened for reading, and its size.
struct OpenFile {
  int fd = -1;
  uint64_t size = 0;
};

absl::StatusOr<OpenFile> OpenForReading(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open ", Quote(path)));
  struct stat info;
  absl::Status status;
  if (::fstat(fd, &info) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot stat ", Quote(path)));
  } else if (!S_ISREG(info.st_mode)) {
    status = absl::InvalidArgumentError(
        absl::StrCat(Quote(path), ": not a regular file, so not a safetensors file"));
  }
  if (!status.ok()) {
    ::close(fd);
    return status;
  }
  return OpenFile{fd, static_cast<uint64_t>(info.st_size)};
}

std::atomic<uint64_t> temporary_counter{0};

}  // namespace

absl::StatusOr<std::string> SafetensorsDtype(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
      return std::string("F32");
    case plan::INT32:
      return std::string("I32");
    case plan::INT64:
      return std::string("I64");
    case plan::UINT8:
      return std::string("U8");
    case plan::UINT16:
      return std::string("U16");
    case plan::BFLOAT16:
      return std::string("BF16");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no safetensors dtype for data type ", DataTypeName(data_type)));
  }
}

absl::StatusOr<plan::DataType> DataTypeFromSafetensors(absl::string_view dtype) {
  for (plan::DataType data_type : kSupportedTypes) {
    if (*SafetensorsDtype(data_type) == dtype) return data_type;
  }
  std::vector<std::string> supported;
  for (plan::DataType data_type : kSupportedTypes) {
    supported.push_back(*SafetensorsDtype(data_type));
  }
  std::string supported_text = absl::StrJoin(supported, ", ");
  for (const char* known : kKnownDtypes) {
    if (dtype == known) {
      return absl::UnimplementedError(absl::StrCat(
          "dtype ", dtype, " is not supported by Loom (supported: ", supported_text, ")"));
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype ", Quote(dtype), " (Loom reads ", supported_text, ")"));
}

absl::StatusOr<std::string> SerializeSafetensors(const Checkpoint& checkpoint) {
  absl::StatusOr<Layout> layout = PlanLayout(checkpoint);
  if (!layout.ok()) return layout.status();
  size_t size = layout->prefix.size();
  for (const auto& [name, bytes] : layout->order) size += bytes;
  std::string contents;
  contents.reserve(size);
  contents += layout->prefix;
  for (const auto& [name, bytes] : layout->order) {
    const std::vector<std::byte>& data = checkpoint.tensors.at(name).bytes;
    contents.append(reinterpret_cast<const char*>(data.data()), data.size());
  }
  return contents;
}

absl::StatusOr<Checkpoint> ParseSafetensors(absl::string_view contents, absl::string_view source) {
  MemorySource file(contents);
  return ReadFrom(file, source);
}

namespace {

// Writes the file `layout` describes to `path` atomically (a new temporary file next to it,
// flushed, renamed over it, the directory flushed), its tensors' bytes from `bytes_of`.
absl::Status WriteAtomically(const std::string& path, const absl::StatusOr<Layout>& layout,
                             const TensorBytes& bytes_of) {
  if (!layout.ok()) {
    return absl::Status(layout.status().code(), absl::StrCat("cannot write ", Quote(path), ": ",
                                                             layout.status().message()));
  }

  // A new file next to `path` (same directory, so same file system and rename is atomic).
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temporary = absl::StrCat(path, ".tmp.", ::getpid(), ".", temporary_counter.fetch_add(1));
    fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) {
      return absl::ErrnoToStatus(errno, absl::StrCat("cannot create ", Quote(temporary)));
    }
  }

  absl::Status status = WriteLayout(fd, *layout, bytes_of, temporary);
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot sync ", Quote(temporary)));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", Quote(temporary)));
  }
  if (status.ok() && ::rename(temporary.c_str(), path.c_str()) != 0) {
    status = absl::ErrnoToStatus(
        errno, absl::StrCat("cannot rename ", Quote(temporary), " to ", Quote(path)));
  }
  if (!status.ok()) {
    ::unlink(temporary.c_str());
    return status;
  }
  return SyncParentDirectory(path);
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, const Checkpoint& checkpoint) {
  return WriteAtomically(path, PlanLayout(checkpoint), BytesOf(checkpoint));
}

absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      const TensorSource& source) {
  HostTensor current;  // one tensor at a time
  TensorBytes bytes_of =
      [&](const std::string& name) -> absl::StatusOr<absl::Span<const std::byte>> {
    absl::StatusOr<HostTensor> tensor = source(name);
    if (!tensor.ok()) return tensor.status();
    const SafetensorsTensorInfo& expected = tensors.at(name);
    if (tensor->data_type != expected.data_type || tensor->shape != expected.shape) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", Quote(name), " is ", DataTypeName(tensor->data_type),
                       tensor->shape.ToString(), ", not the ", DataTypeName(expected.data_type),
                       expected.shape.ToString(), " the file's header says"));
    }
    current = *std::move(tensor);
    return absl::MakeConstSpan(current.bytes);
  };
  return WriteAtomically(path, PlanLayout(tensors, metadata), bytes_of);
}

absl::StatusOr<Checkpoint> ReadSafetensors(const std::string& path) {
  absl::StatusOr<OpenFile> file = OpenForReading(path);
  if (!file.ok()) return file.status();
  FileSource source(file->fd, file->size, path);
  absl::StatusOr<Checkpoint> checkpoint = ReadFrom(source, path);
  ::close(file->fd);
  return checkpoint;
}

SafetensorsReader::SafetensorsReader(int fd, uint64_t size, std::string path)
    : fd_(fd), size_(size), path_(std::move(path)) {}

SafetensorsReader::~SafetensorsReader() { ::close(fd_); }

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  absl::StatusOr<OpenFile> file = OpenForReading(path);
  if (!file.ok()) return file.status();
  // Owns the descriptor from here on, so every return below closes it.
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader(file->fd, file->size, path));
  FileSource source(reader->fd_, reader->size_, reader->path_);
  absl::StatusOr<Header> header = ReadHeader(source, reader->path_);
  if (!header.ok()) return header.status();
  reader->metadata_ = std::move(header->metadata);
  for (const Entry& entry : header->entries) {
    reader->tensors_[entry.name] = SafetensorsTensorInfo{entry.data_type, entry.shape};
    reader->locations_[entry.name] =
        Location{header->data_start + entry.begin, header->data_start + entry.end};
  }
  return reader;
}

const SafetensorsTensorInfo* SafetensorsReader::Find(const std::string& name) const {
  auto found = tensors_.find(name);
  return found == tensors_.end() ? nullptr : &found->second;
}

absl::StatusOr<HostTensor> SafetensorsReader::ReadTensor(const std::string& name) {
  const SafetensorsTensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", Quote(path_), " has no tensor ", Quote(name)));
  }
  std::vector<int64_t> begin(info->shape.rank(), 0);
  return ReadWindow(name, begin, info->shape);
}

absl::StatusOr<HostTensor> SafetensorsReader::ReadWindow(const std::string& name,
                                                         absl::Span<const int64_t> begin,
                                                         const Shape& shape) {
  const SafetensorsTensorInfo* info = Find(name);
  if (info == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("checkpoint ", Quote(path_), " has no tensor ", Quote(name)));
  }
  const Shape& full = info->shape;
  const int rank = full.rank();
  auto window_text = [&] {
    return absl::StrCat("the window at [", absl::StrJoin(begin, ", "), "] of shape ",
                        shape.ToString(), " of tensor ", Quote(name), " ",
                        DataTypeName(info->data_type), full.ToString(), " in checkpoint ",
                        Quote(path_));
  };
  if (static_cast<int>(begin.size()) != rank || shape.rank() != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(window_text(), " has another rank than the tensor"));
  }
  for (int axis = 0; axis < rank; ++axis) {
    if (begin[axis] < 0 || shape.dimension(axis) < 0 ||
        begin[axis] > full.dimension(axis) - shape.dimension(axis)) {
      return absl::InvalidArgumentError(
          absl::StrCat(window_text(), " does not lie inside the tensor (axis ", axis, ")"));
    }
  }

  HostTensor tensor;
  tensor.data_type = info->data_type;
  tensor.shape = shape;
  const int64_t element_size = DataTypeSize(info->data_type);
  tensor.bytes.resize(static_cast<size_t>(shape.NumElements() * element_size));
  if (tensor.bytes.empty()) return tensor;

  // Row-major element strides of the whole tensor.
  std::vector<int64_t> strides(rank, 1);
  for (int axis = rank - 2; axis >= 0; --axis) {
    strides[axis] = strides[axis + 1] * full.dimension(axis + 1);
  }
  // Axes after `inner` span the whole tensor, so that the window is contiguous from axis `inner`
  // inwards: each run covers shape[inner] * strides[inner] elements.
  int inner = 0;
  for (int axis = rank - 1; axis >= 0; --axis) {
    if (shape.dimension(axis) != full.dimension(axis)) {
      inner = axis;
      break;
    }
  }
  const int64_t run_elements = rank == 0 ? 1 : shape.dimension(inner) * strides[inner];
  const size_t run_bytes = static_cast<size_t>(run_elements * element_size);
  const uint64_t tensor_begin = locations_.at(name).begin;

  FileSource source(fd_, size_, path_);
  std::vector<int64_t> index(inner, 0);  // over the axes before `inner`
  std::byte* output = tensor.bytes.data();
  while (true) {
    int64_t element = 0;
    for (int axis = 0; axis < rank; ++axis) {
      element += (begin[axis] + (axis < inner ? index[axis] : 0)) * strides[axis];
    }
    if (absl::Status status = source.Read(
            tensor_begin + static_cast<uint64_t>(element * element_size), output, run_bytes);
        !status.ok()) {
      return status;
    }
    output += run_bytes;
    int axis = inner - 1;
    while (axis >= 0 && ++index[axis] == shape.dimension(axis)) index[axis--] = 0;
    if (axis < 0) break;
  }
  return tensor;
}

}  // namespace loom::checkpoint
