// Reading safetensors checkpoints (safetensors.h): a whole file (ReadSafetensors) or bytes in
// memory (ParseSafetensors), and SafetensorsReader, which reads single tensors and windows of them.
// Headers are read and validated in safetensors_header.cc.

#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/file_roots.h"
#include "core/safetensors.h"
#include "core/safetensors_format.h"
#include "core/safetensors_header.h"

namespace loom::checkpoint {
namespace {

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

// A file's bytes, read with pread (a file truncated while it is read is DATA_LOSS naming it).
class FileSource : public ByteSource {
 public:
  explicit FileSource(const ReadableFile& file) : file_(file) {}
  uint64_t size() const override { return static_cast<uint64_t>(file_.size()); }
  absl::Status Read(uint64_t offset, void* out, size_t length) override {
    return file_.ReadAt(static_cast<int64_t>(offset),
                        absl::Span<char>(static_cast<char*>(out), length));
  }

 private:
  const ReadableFile& file_;
};

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

}  // namespace

absl::StatusOr<Checkpoint> ParseSafetensors(absl::string_view contents, absl::string_view source) {
  MemorySource file(contents);
  return ReadFrom(file, source);
}

absl::StatusOr<Checkpoint> ReadSafetensors(const ReadableFile& file) {
  FileSource source(file);
  return ReadFrom(source, file.path());
}

absl::StatusOr<Checkpoint> ReadSafetensors(const std::string& path) {
  absl::StatusOr<ReadableFile> file = FileRoots::Unrestricted().OpenForReading(path);
  if (!file.ok()) return file.status();
  return ReadSafetensors(*file);
}

SafetensorsReader::SafetensorsReader(ReadableFile file) : file_(std::move(file)) {}

SafetensorsReader::~SafetensorsReader() = default;

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(
    const std::string& path) {
  absl::StatusOr<ReadableFile> file = FileRoots::Unrestricted().OpenForReading(path);
  if (!file.ok()) return file.status();
  return Open(*std::move(file));
}

absl::StatusOr<std::unique_ptr<SafetensorsReader>> SafetensorsReader::Open(ReadableFile file) {
  std::unique_ptr<SafetensorsReader> reader(new SafetensorsReader(std::move(file)));
  FileSource source(reader->file_);
  absl::StatusOr<Header> header = ReadHeader(source, reader->path());
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
        absl::StrCat("checkpoint ", Quote(path()), " has no tensor ", Quote(name)));
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
        absl::StrCat("checkpoint ", Quote(path()), " has no tensor ", Quote(name)));
  }
  const Shape& full = info->shape;
  const int rank = full.rank();
  auto window_text = [&] {
    return absl::StrCat("the window at [", absl::StrJoin(begin, ", "), "] of shape ",
                        shape.ToString(), " of tensor ", Quote(name), " ",
                        DataTypeName(info->data_type), full.ToString(), " in checkpoint ",
                        Quote(path()));
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

  FileSource source(file_);
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
