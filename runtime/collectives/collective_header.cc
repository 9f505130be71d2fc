#include "runtime/collectives/collective_header.h"

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace loom {
namespace {

constexpr uint64_t kMagic = 0x314C4F434D4F4F4Cull;  // "LOOMCOL1", little-endian

// Word indices of the record.
constexpr int kMagicWord = 0;
constexpr int kRankWord = 1;
constexpr int kInstanceWord = 2;
constexpr int kSequenceWord = 3;
constexpr int kKindWord = 4;
constexpr int kReduceWord = 5;
constexpr int kAxisWord = 6;
constexpr int kConcatAxisWord = 7;
constexpr int kInputTypeWord = 8;
constexpr int kInputRankWord = 9;
constexpr int kInputDimensionsWord = 10;
constexpr int kOutputTypeWord = kInputDimensionsWord + CollectiveHeader::kMaxAxes;
constexpr int kOutputRankWord = kOutputTypeWord + 1;
constexpr int kOutputDimensionsWord = kOutputRankWord + 1;
constexpr int kNameLengthWord = kOutputDimensionsWord + CollectiveHeader::kMaxAxes;
constexpr size_t kNameOffset = (kNameLengthWord + 1) * 8;
static_assert(kNameOffset + CollectiveHeader::kMaxNameBytes <= CollectiveHeader::kBytes);

void PutWord(std::byte* bytes, int word, uint64_t value) {
  for (int i = 0; i < 8; ++i)
    bytes[word * 8 + i] = static_cast<std::byte>((value >> (8 * i)) & 0xFF);
}

uint64_t GetWord(const std::byte* bytes, int word) {
  uint64_t value = 0;
  for (int i = 0; i < 8; ++i) value |= static_cast<uint64_t>(bytes[word * 8 + i]) << (8 * i);
  return value;
}

// FNV-1a: stable across processes and builds (absl::Hash is not).
uint64_t Fingerprint(const std::string& text) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001B3ull;
  }
  return hash;
}

// The name as it travels: whole when it fits, else a prefix and the whole name's fingerprint.
std::string CarriedName(const std::string& name) {
  if (name.size() <= CollectiveHeader::kMaxNameBytes) return name;
  const std::string suffix = absl::StrFormat("...#%016x", Fingerprint(name));
  return absl::StrCat(name.substr(0, CollectiveHeader::kMaxNameBytes - suffix.size()), suffix);
}

void PutShape(std::byte* bytes, int rank_word, int first_word, const Shape& shape) {
  PutWord(bytes, rank_word, static_cast<uint64_t>(shape.rank()));
  for (int axis = 0; axis < CollectiveHeader::kMaxAxes; ++axis) {
    PutWord(bytes, first_word + axis,
            axis < shape.rank() ? static_cast<uint64_t>(shape.dimension(axis)) : 0);
  }
}

absl::Status GetShape(const std::byte* bytes, int rank_word, int first_word, Shape* shape) {
  const uint64_t rank = GetWord(bytes, rank_word);
  if (rank > static_cast<uint64_t>(CollectiveHeader::kMaxAxes)) {
    return absl::DataLossError(absl::StrCat("a collective header with a shape of ", rank, " axes"));
  }
  std::vector<int64_t> dimensions(rank);
  for (uint64_t axis = 0; axis < rank; ++axis) {
    dimensions[axis] = static_cast<int64_t>(GetWord(bytes, first_word + static_cast<int>(axis)));
  }
  *shape = Shape(dimensions);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CollectiveHeader> CollectiveHeader::FromCall(const CollectiveCall& call,
                                                            int64_t instance) {
  for (const TensorView* view : {&call.input, &call.output}) {
    if (view->shape.rank() > kMaxAxes) {
      return absl::InvalidArgumentError(
          absl::StrCat("collective ", call.conf->name(), " on rank ", call.rank, ": a buffer of ",
                       view->shape.rank(), " axes ", view->shape.ToString(),
                       "; network collectives move tensors of at most ", kMaxAxes, " axes"));
    }
  }
  CollectiveHeader header;
  header.rank = call.rank;
  header.instance = instance;
  header.conf.set_kind(call.conf->kind());
  header.conf.set_reduce(call.conf->reduce());
  header.conf.set_axis(call.conf->axis());
  header.conf.set_concat_axis(call.conf->concat_axis());
  header.conf.set_sequence(call.conf->sequence());
  header.conf.set_name(CarriedName(call.conf->name()));
  header.input_type = call.input.data_type;
  header.input_shape = call.input.shape;
  header.output_type = call.output.data_type;
  header.output_shape = call.output.shape;
  return header;
}

void CollectiveHeader::Encode(std::byte* bytes) const {
  std::memset(bytes, 0, kBytes);
  PutWord(bytes, kMagicWord, kMagic);
  PutWord(bytes, kRankWord, static_cast<uint64_t>(rank));
  PutWord(bytes, kInstanceWord, static_cast<uint64_t>(instance));
  PutWord(bytes, kSequenceWord, static_cast<uint64_t>(conf.sequence()));
  PutWord(bytes, kKindWord, static_cast<uint64_t>(conf.kind()));
  PutWord(bytes, kReduceWord, static_cast<uint64_t>(conf.reduce()));
  PutWord(bytes, kAxisWord, static_cast<uint64_t>(static_cast<int64_t>(conf.axis())));
  PutWord(bytes, kConcatAxisWord, static_cast<uint64_t>(static_cast<int64_t>(conf.concat_axis())));
  PutWord(bytes, kInputTypeWord, static_cast<uint64_t>(input_type));
  PutShape(bytes, kInputRankWord, kInputDimensionsWord, input_shape);
  PutWord(bytes, kOutputTypeWord, static_cast<uint64_t>(output_type));
  PutShape(bytes, kOutputRankWord, kOutputDimensionsWord, output_shape);
  const std::string& name = conf.name();
  PutWord(bytes, kNameLengthWord, name.size());
  std::memcpy(bytes + kNameOffset, name.data(), name.size());
}

absl::StatusOr<CollectiveHeader> CollectiveHeader::Decode(const std::byte* bytes) {
  if (GetWord(bytes, kMagicWord) != kMagic) {
    return absl::DataLossError("a collective header without its magic number");
  }
  CollectiveHeader header;
  header.rank = static_cast<int>(GetWord(bytes, kRankWord));
  header.instance = static_cast<int64_t>(GetWord(bytes, kInstanceWord));
  header.conf.set_sequence(static_cast<int64_t>(GetWord(bytes, kSequenceWord)));
  header.conf.set_kind(static_cast<plan::CollectiveKind>(GetWord(bytes, kKindWord)));
  header.conf.set_reduce(static_cast<plan::ReduceOperation>(GetWord(bytes, kReduceWord)));
  header.conf.set_axis(static_cast<int32_t>(static_cast<int64_t>(GetWord(bytes, kAxisWord))));
  header.conf.set_concat_axis(
      static_cast<int32_t>(static_cast<int64_t>(GetWord(bytes, kConcatAxisWord))));
  header.input_type = static_cast<plan::DataType>(GetWord(bytes, kInputTypeWord));
  header.output_type = static_cast<plan::DataType>(GetWord(bytes, kOutputTypeWord));
  if (absl::Status status =
          GetShape(bytes, kInputRankWord, kInputDimensionsWord, &header.input_shape);
      !status.ok()) {
    return status;
  }
  if (absl::Status status =
          GetShape(bytes, kOutputRankWord, kOutputDimensionsWord, &header.output_shape);
      !status.ok()) {
    return status;
  }
  const uint64_t name_length = GetWord(bytes, kNameLengthWord);
  if (name_length > kMaxNameBytes) {
    return absl::DataLossError(
        absl::StrCat("a collective header with a name of ", name_length, " bytes"));
  }
  header.conf.set_name(
      std::string(reinterpret_cast<const char*>(bytes + kNameOffset), name_length));
  return header;
}

}  // namespace loom
