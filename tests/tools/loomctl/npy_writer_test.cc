// The .npy writer: header layout per the NPY 1.0 spec and the data bytes.
#include "tools/loomctl/npy_writer.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

template <typename T>
HostTensor MakeTensor(plan::DataType data_type, Shape shape, const std::vector<T>& values) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(T));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

// The header dict of an encoded file, and the offset where the data starts.
struct ParsedHeader {
  std::string dict;
  size_t data_offset = 0;
};

ParsedHeader ParseHeader(const std::string& file) {
  ParsedHeader parsed;
  EXPECT_GE(file.size(), 10u);
  EXPECT_EQ(file.substr(0, 6), "\x93NUMPY");
  EXPECT_EQ(file[6], '\x01') << "major version";
  EXPECT_EQ(file[7], '\x00') << "minor version";
  size_t header_length = static_cast<unsigned char>(file[8]) |
                         (static_cast<size_t>(static_cast<unsigned char>(file[9])) << 8);
  parsed.data_offset = 10 + header_length;
  EXPECT_LE(parsed.data_offset, file.size());
  parsed.dict = file.substr(10, header_length);
  return parsed;
}

TEST(NpyWriterTest, TypeStrings) {
  EXPECT_EQ(*NpyTypeString(plan::FLOAT32), "<f4");
  EXPECT_EQ(*NpyTypeString(plan::INT32), "<i4");
  EXPECT_EQ(*NpyTypeString(plan::INT64), "<i8");
  EXPECT_EQ(*NpyTypeString(plan::UINT8), "|u1");
  EXPECT_EQ(*NpyTypeString(plan::UINT16), "<u2");
  EXPECT_EQ(*NpyTypeString(plan::BFLOAT16), "<u2");
  EXPECT_FALSE(NpyTypeString(plan::DATA_TYPE_UNSPECIFIED).ok());
}

TEST(NpyWriterTest, HeaderFormatAndAlignment) {
  absl::StatusOr<std::string> header = NpyHeader(plan::FLOAT32, Shape{64, 256});
  ASSERT_TRUE(header.ok()) << header.status();
  ParsedHeader parsed = ParseHeader(*header);
  EXPECT_EQ(parsed.data_offset, header->size());
  EXPECT_EQ(header->size() % 64, 0u) << "the data must start 64-byte aligned";
  EXPECT_THAT(parsed.dict,
              StartsWith("{'descr': '<f4', 'fortran_order': False, 'shape': (64, 256), }"));
  EXPECT_EQ(parsed.dict.back(), '\n');
  // Only spaces between the dict and the newline.
  size_t close = parsed.dict.find('}');
  EXPECT_EQ(parsed.dict.find_first_not_of(' ', close + 1), parsed.dict.size() - 1);
}

TEST(NpyWriterTest, ShapeTuples) {
  struct Case {
    Shape shape;
    std::string tuple;
  };
  for (const Case& test_case :
       {Case{Shape{}, "'shape': ()"}, Case{Shape{5}, "'shape': (5,)"},
        Case{Shape{2, 3, 4}, "'shape': (2, 3, 4)"}, Case{Shape{0, 3}, "'shape': (0, 3)"}}) {
    absl::StatusOr<std::string> header = NpyHeader(plan::INT64, test_case.shape);
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_THAT(*header, HasSubstr(test_case.tuple)) << test_case.shape.ToString();
    EXPECT_THAT(*header, HasSubstr("'descr': '<i8'"));
    EXPECT_EQ(header->size() % 64, 0u) << test_case.shape.ToString();
  }
}

TEST(NpyWriterTest, EveryDictLengthPadsToSixtyFour) {
  // Shapes whose dicts grow one character at a time cross every padding remainder.
  std::vector<int64_t> dimensions;
  for (int rank = 1; rank <= 40; ++rank) {
    dimensions.push_back(rank % 7 + 1);
    absl::StatusOr<std::string> header = NpyHeader(plan::UINT8, Shape(dimensions));
    ASSERT_TRUE(header.ok()) << header.status();
    EXPECT_EQ(header->size() % 64, 0u) << "rank " << rank;
    EXPECT_EQ(header->back(), '\n');
    EXPECT_EQ(ParseHeader(*header).data_offset, header->size());
  }
}

TEST(NpyWriterTest, EncodeKeepsTheBytes) {
  std::vector<float> values = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, 42.0f};
  HostTensor tensor = MakeTensor(plan::FLOAT32, Shape{2, 3}, values);
  absl::StatusOr<std::string> file = EncodeNpy(tensor);
  ASSERT_TRUE(file.ok()) << file.status();
  ParsedHeader parsed = ParseHeader(*file);
  ASSERT_EQ(file->size() - parsed.data_offset, values.size() * sizeof(float));
  std::vector<float> read_back(values.size());
  std::memcpy(read_back.data(), file->data() + parsed.data_offset,
              file->size() - parsed.data_offset);
  EXPECT_EQ(read_back, values);
}

TEST(NpyWriterTest, BFloat16IsWrittenAsItsBits) {
  std::vector<uint16_t> bits = {0x3F80, 0xC000, 0x7F80};  // 1, -2, +inf
  HostTensor tensor = MakeTensor(plan::BFLOAT16, Shape{3}, bits);
  absl::StatusOr<std::string> file = EncodeNpy(tensor);
  ASSERT_TRUE(file.ok()) << file.status();
  ParsedHeader parsed = ParseHeader(*file);
  EXPECT_THAT(parsed.dict, HasSubstr("'descr': '<u2'"));
  EXPECT_EQ(file->substr(parsed.data_offset),
            std::string(reinterpret_cast<const char*>(bits.data()), 6));
}

TEST(NpyWriterTest, ByteCountMustMatchTheShape) {
  HostTensor tensor = MakeTensor(plan::INT32, Shape{2, 2}, std::vector<int32_t>{1, 2, 3});
  absl::StatusOr<std::string> file = EncodeNpy(tensor);
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), HasSubstr("16 bytes, not 12"));
}

TEST(NpyWriterTest, WriteFileRoundTrip) {
  HostTensor tensor =
      MakeTensor(plan::INT64, Shape{4}, std::vector<int64_t>{-1, 0, 1, int64_t{1} << 40});
  std::string path = ::testing::TempDir() + "/npy_writer_test_round_trip.npy";
  ASSERT_TRUE(WriteNpyFile(tensor, path).ok());
  std::ifstream file(path, std::ios::binary);
  std::stringstream contents;
  contents << file.rdbuf();
  EXPECT_EQ(contents.str(), *EncodeNpy(tensor));
}

TEST(NpyWriterTest, WriteErrorsNameThePath) {
  HostTensor tensor = MakeTensor(plan::UINT8, Shape{1}, std::vector<uint8_t>{7});
  std::string path = ::testing::TempDir() + "/no/such/directory/x.npy";
  absl::Status status = WriteNpyFile(tensor, path);
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr(path));
}

}  // namespace
}  // namespace loom::loomctl
