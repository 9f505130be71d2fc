// Writing safetensors checkpoints (safetensors.h): the file's layout (tensor order, header JSON,
// padding), SerializeSafetensors, and the atomic WriteSafetensors and WriteSafetensorsStreamed.

#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "core/data_type.h"
#include "core/file_roots.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "core/safetensors_format.h"

namespace loom::checkpoint {
namespace {

// The writer buffers small writes up to this size; larger tensors are written directly.
constexpr size_t kWriteBufferSize = size_t{1} << 20;

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

std::atomic<uint64_t> temporary_counter{0};

}  // namespace

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

namespace {

std::string PathIn(const WritableDirectory& directory, const std::string& name) {
  const std::string& parent = directory.directory();
  if (parent.empty() || parent == ".") return name;
  return absl::StrCat(parent, parent.back() == '/' ? "" : "/", name);
}

// Renames `temporary` to `name` in the directory `descriptor` unless a file is there:
// ALREADY_EXISTS naming `path` then. Where the file system lacks RENAME_NOREPLACE, a hard link does
// the same.
absl::Status RenameWithoutReplacing(int descriptor, const std::string& temporary,
                                    const std::string& name, const std::string& path) {
  auto exists = [&] {
    return absl::AlreadyExistsError(
        absl::StrCat(Quote(path), " already exists: it is kept (not replaced)"));
  };
  if (::renameat2(descriptor, temporary.c_str(), descriptor, name.c_str(), RENAME_NOREPLACE) == 0) {
    return absl::OkStatus();
  }
  if (errno == EEXIST) return exists();
  if (errno != EINVAL && errno != ENOSYS) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot rename the temporary file ",
                                                   Quote(temporary), " to ", Quote(path)));
  }
  if (::linkat(descriptor, temporary.c_str(), descriptor, name.c_str(), 0) != 0) {
    if (errno == EEXIST) return exists();
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot link the temporary file ",
                                                   Quote(temporary), " to ", Quote(path)));
  }
  ::unlinkat(descriptor, temporary.c_str(), 0);
  return absl::OkStatus();
}

// Writes the file `layout` describes into `directory` as its name, atomically (a new temporary
// file next to it, flushed, renamed to it, the directory flushed), its tensors' bytes from
// `bytes_of`; a file already there is replaced or kept as `existing` says.
absl::Status WriteAtomically(const WritableDirectory& directory,
                             const absl::StatusOr<Layout>& layout, const TensorBytes& bytes_of,
                             ExistingFile existing) {
  const std::string path = PathIn(directory, directory.name());
  if (!layout.ok()) {
    return absl::Status(layout.status().code(), absl::StrCat("cannot write ", Quote(path), ": ",
                                                             layout.status().message()));
  }
  const int parent = directory.descriptor();

  // A new file next to `path` (same directory, so same file system and rename is atomic).
  std::string temporary;
  int fd = -1;
  for (int attempt = 0; fd < 0; ++attempt) {
    temporary =
        absl::StrCat(directory.name(), ".tmp.", ::getpid(), ".", temporary_counter.fetch_add(1));
    fd = ::openat(parent, temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  0666);
    if (fd < 0 && (errno != EEXIST || attempt >= 100)) {
      return absl::ErrnoToStatus(
          errno, absl::StrCat("cannot create ", Quote(PathIn(directory, temporary))));
    }
  }
  const std::string temporary_path = PathIn(directory, temporary);

  absl::Status status = WriteLayout(fd, *layout, bytes_of, temporary_path);
  if (status.ok() && ::fsync(fd) != 0) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot sync ", Quote(temporary_path)));
  }
  if (::close(fd) != 0 && status.ok()) {
    status = absl::ErrnoToStatus(errno, absl::StrCat("cannot close ", Quote(temporary_path)));
  }
  if (status.ok()) {
    if (existing == ExistingFile::kKeep) {
      status = RenameWithoutReplacing(parent, temporary, directory.name(), path);
    } else if (::renameat(parent, temporary.c_str(), parent, directory.name().c_str()) != 0) {
      status = absl::ErrnoToStatus(
          errno, absl::StrCat("cannot rename ", Quote(temporary_path), " to ", Quote(path)));
    }
  }
  if (!status.ok()) {
    ::unlinkat(parent, temporary.c_str(), 0);
    return status;
  }
  // Flushes the directory, so that the rename is durable. EINVAL: the file system cannot sync
  // directories; nothing more can be done.
  if (::fsync(parent) != 0 && errno != EINVAL) {
    return absl::ErrnoToStatus(
        errno, absl::StrCat("cannot sync directory ", Quote(directory.directory())));
  }
  return absl::OkStatus();
}

// The directory of `path` (anywhere: FileRoots::Unrestricted) to write it into.
absl::StatusOr<WritableDirectory> DirectoryOf(const std::string& path) {
  absl::StatusOr<WritableDirectory> directory = FileRoots::Unrestricted().OpenForWriting(path);
  if (!directory.ok()) {
    return absl::Status(directory.status().code(), absl::StrCat("cannot write ", Quote(path), ": ",
                                                                directory.status().message()));
  }
  return directory;
}

}  // namespace

absl::Status WriteSafetensors(const WritableDirectory& directory, const Checkpoint& checkpoint,
                              ExistingFile existing) {
  return WriteAtomically(directory, PlanLayout(checkpoint), BytesOf(checkpoint), existing);
}

absl::Status WriteSafetensors(const std::string& path, const Checkpoint& checkpoint) {
  absl::StatusOr<WritableDirectory> directory = DirectoryOf(path);
  if (!directory.ok()) return directory.status();
  return WriteSafetensors(*directory, checkpoint, ExistingFile::kReplace);
}

absl::Status WriteSafetensorsStreamed(const WritableDirectory& directory,
                                      const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      const TensorSource& source, ExistingFile existing) {
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
  return WriteAtomically(directory, PlanLayout(tensors, metadata), bytes_of, existing);
}

absl::Status WriteSafetensorsStreamed(const std::string& path,
                                      const std::map<std::string, SafetensorsTensorInfo>& tensors,
                                      const std::map<std::string, std::string>& metadata,
                                      const TensorSource& source) {
  absl::StatusOr<WritableDirectory> directory = DirectoryOf(path);
  if (!directory.ok()) return directory.status();
  return WriteSafetensorsStreamed(*directory, tensors, metadata, source, ExistingFile::kReplace);
}

}  // namespace loom::checkpoint
