#include "tools/loomctl/npy_writer.h"

#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"

namespace loom::loomctl {
namespace {

// The type strings below say little-endian: the data is written as it lies in memory.
static_assert(std::endian::native == std::endian::little,
              "the .npy writer assumes a little-endian host");

// "\x93NUMPY", major version 1, minor version 0.
constexpr char kMagic[] = {'\x93', 'N', 'U', 'M', 'P', 'Y', '\x01', '\x00'};
constexpr size_t kMagicSize = sizeof(kMagic);
// Magic and version, then the uint16 header length.
constexpr size_t kPreambleSize = kMagicSize + 2;
constexpr size_t kAlignment = 64;
constexpr size_t kMaxHeaderSize = 65535;  // what the uint16 of version 1.0 can say

}  // namespace

absl::StatusOr<std::string> NpyTypeString(plan::DataType data_type) {
  switch (data_type) {
    case plan::FLOAT32:
      return std::string("<f4");
    case plan::INT32:
      return std::string("<i4");
    case plan::INT64:
      return std::string("<i8");
    case plan::UINT8:
      return std::string("|u1");
    case plan::UINT16:
    case plan::BFLOAT16:
      return std::string("<u2");
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("no .npy type for data type ", DataTypeName(data_type)));
  }
}

absl::StatusOr<std::string> NpyHeader(plan::DataType data_type, const Shape& shape) {
  absl::StatusOr<std::string> type_string = NpyTypeString(data_type);
  if (!type_string.ok()) return type_string.status();
  // A Python tuple: "()", "(3,)", "(2, 3)".
  std::string tuple =
      absl::StrCat("(", absl::StrJoin(shape.dimensions(), ", "), shape.rank() == 1 ? ",)" : ")");
  std::string dict = absl::StrCat("{'descr': '", *type_string,
                                  "', 'fortran_order': False, 'shape': ", tuple, ", }");
  // Spaces, then '\n', so that preamble + dict is a multiple of 64 bytes.
  size_t unpadded = kPreambleSize + dict.size() + 1;
  size_t padding = (kAlignment - unpadded % kAlignment) % kAlignment;
  dict.append(padding, ' ');
  dict += '\n';
  if (dict.size() > kMaxHeaderSize) {
    return absl::InvalidArgumentError(absl::StrCat("the .npy header of shape ", shape.ToString(),
                                                   " is too long for format version 1.0"));
  }
  std::string header(kMagic, kMagicSize);
  header += static_cast<char>(dict.size() & 0xFF);
  header += static_cast<char>((dict.size() >> 8) & 0xFF);
  header += dict;
  return header;
}

absl::StatusOr<std::string> EncodeNpy(const HostTensor& tensor) {
  int64_t expected_bytes = tensor.shape.NumElements() * DataTypeSize(tensor.data_type);
  if (static_cast<int64_t>(tensor.bytes.size()) != expected_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("a ", DataTypeName(tensor.data_type), tensor.shape.ToString(), " tensor has ",
                     expected_bytes, " bytes, not ", tensor.bytes.size()));
  }
  absl::StatusOr<std::string> file = NpyHeader(tensor.data_type, tensor.shape);
  if (!file.ok()) return file.status();
  file->append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return file;
}

absl::Status WriteNpyFile(const HostTensor& tensor, const std::string& path) {
  absl::StatusOr<std::string> contents = EncodeNpy(tensor);
  if (!contents.ok()) {
    return absl::Status(contents.status().code(),
                        absl::StrCat("cannot write '", path, "': ", contents.status().message()));
  }
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("cannot open '", path, "' for writing: ", std::strerror(errno)));
  }
  size_t written = std::fwrite(contents->data(), 1, contents->size(), file);
  int write_error = written == contents->size() ? 0 : errno;
  if (std::fclose(file) != 0 && write_error == 0) write_error = errno;
  if (written != contents->size() || write_error != 0) {
    if (write_error == 0) write_error = EIO;
    return absl::UnavailableError(
        absl::StrCat("cannot write '", path, "': ", std::strerror(write_error)));
  }
  return absl::OkStatus();
}

}  // namespace loom::loomctl
