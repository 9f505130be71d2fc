#include "core/safetensors_header.h"

#include <algorithm>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "core/safetensors_format.h"

namespace loom::checkpoint {
namespace {

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

}  // namespace

absl::StatusOr<Header> ReadHeader(ByteSource& file, absl::string_view name) {
  std::string source = Quote(name);
  uint64_t file_size = file.size();
  // A file that is no safetensors file fails here: the messages say what is wrong without a byte
  // of it (the length read) or its size.
  if (file_size < kLengthSize) {
    return Invalid(source,
                   "the file is truncated or no safetensors file: it ends before the 8 bytes of "
                   "the header length");
  }
  unsigned char length_bytes[kLengthSize];
  if (absl::Status status = file.Read(0, length_bytes, kLengthSize); !status.ok()) return status;
  uint64_t header_size = DecodeUint64(length_bytes);
  if (header_size > file_size - kLengthSize) {
    return Invalid(source,
                   "the header length field is not a plausible safetensors header length: the "
                   "header it gives runs past the end of the file (is the file truncated, or no "
                   "safetensors file?)");
  }
  if (header_size > kMaxSafetensorsHeaderSize) {
    return Invalid(source, absl::StrCat("the header length field is not a plausible safetensors "
                                        "header length: it exceeds the limit of ",
                                        kMaxSafetensorsHeaderSize, " bytes"));
  }
  std::string header(header_size, '\0');
  if (absl::Status status = file.Read(kLengthSize, header.data(), header.size()); !status.ok()) {
    return status;
  }
  absl::StatusOr<JsonValue> json = ParseJson(header);
  if (!json.ok()) {
    // The parser's message quotes the byte it found: keep only where and what was expected.
    absl::string_view message = json.status().message();
    message = message.substr(0, std::min(message.size(), message.find(" (found")));
    return Invalid(source, absl::StrCat("bad header: ", message));
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

}  // namespace loom::checkpoint
