// Safetensors round trips: every data type and shape, the reference implementation's layout and
// test vectors, the Python reference file, and headers other writers may produce.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"
#include "tests/core/safetensors_test_util.h"

namespace loom::checkpoint {
namespace {

using namespace std::string_literals;

TEST_F(SafetensorsTest, RoundTripsEveryDataTypeAndShape) {
  Checkpoint checkpoint = MixedCheckpoint();
  std::string path = Path("mixed.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, checkpoint).ok());
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, checkpoint);
  EXPECT_EQ(read->tensors.at("step").shape.rank(), 0);
  EXPECT_EQ(read->tensors.at("step").Values<int64_t>()[0], INT64_MIN);
  EXPECT_EQ(read->tensors.at("empty_i64").shape, Shape({3, 0, 2}));
  EXPECT_EQ(read->tensors.at("bf16").data_type, plan::BFLOAT16);

  // The file is exactly what SerializeSafetensors makes, and ParseSafetensors reads that too.
  absl::StatusOr<std::string> serialized = SerializeSafetensors(checkpoint);
  ASSERT_TRUE(serialized.ok());
  EXPECT_EQ(ReadFile(path), *serialized);
  absl::StatusOr<Checkpoint> parsed = ParseSafetensors(*serialized);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  ExpectSameCheckpoint(*parsed, checkpoint);
}

TEST_F(SafetensorsTest, RoundTripsEmptyCheckpointsAndMetadataAlone) {
  std::string path = Path("empty.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, Checkpoint()).ok());
  EXPECT_EQ(ReadFile(path), FileOf("{}"));
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->tensors.empty());
  EXPECT_TRUE(read->metadata.empty());

  Checkpoint metadata_only;
  metadata_only.metadata["framework"] = "loom";
  ASSERT_TRUE(WriteSafetensors(path, metadata_only).ok());
  read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, metadata_only);
}

TEST_F(SafetensorsTest, RoundTripsLargeTensorsAmongSmallOnes) {
  // Larger than the writer's buffer, so written directly between buffered small tensors.
  std::vector<float> large(700'000);
  for (size_t i = 0; i < large.size(); ++i) large[i] = static_cast<float>(i) * 0.25f;
  std::vector<uint8_t> medium(900'000);
  for (size_t i = 0; i < medium.size(); ++i) medium[i] = static_cast<uint8_t>(i * 7);
  Checkpoint checkpoint;
  checkpoint.tensors["a_small"] = MakeTensor<float>(plan::FLOAT32, {2}, {1, 2});
  checkpoint.tensors["b_large"] = MakeTensor<float>(plan::FLOAT32, {700, 1000}, large);
  checkpoint.tensors["c_small"] = MakeTensor<float>(plan::FLOAT32, {1}, {3});
  checkpoint.tensors["d_medium"] = MakeTensor<uint8_t>(plan::UINT8, {900'000}, medium);
  checkpoint.tensors["e_tiny"] = MakeTensor<uint8_t>(plan::UINT8, {1}, {5});
  std::string path = Path("large.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, checkpoint).ok());
  EXPECT_EQ(ReadFile(path), *SerializeSafetensors(checkpoint));
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, checkpoint);
}

TEST_F(SafetensorsTest, LaysOutFilesAsTheReferenceImplementation) {
  absl::StatusOr<std::string> file = SerializeSafetensors(MixedCheckpoint());
  ASSERT_TRUE(file.ok());
  uint64_t header_size = 0;
  for (int i = 7; i >= 0; --i) header_size = header_size << 8 | static_cast<uint8_t>((*file)[i]);
  EXPECT_EQ(header_size % 8, 0u);  // so that every tensor is aligned to its element size
  std::string header = file->substr(8, header_size);
  size_t json_end = header.find_last_not_of(' ') + 1;  // then only spaces, fewer than 8
  EXPECT_EQ(header[json_end - 1], '}');
  EXPECT_LT(header.size() - json_end, 8u);
  // Metadata first, sorted; then tensors by descending alignment, then name.
  EXPECT_TRUE(header.starts_with(
      "{\"__metadata__\":{\"\":\"empty key\",\"format\":\"pt\",\"loom.step\":\"17\","
      "\"unicode \xe2\x9c\x93\":\"tab\\there \\\"quoted\\\" \\\\ \\u0001\"},"
      "\"empty_i64\":{\"dtype\":\"I64\",\"shape\":[3,0,2],\"data_offsets\":[0,0]},"
      "\"indices\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
      "\"step\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[24,32]},"
      "\"empty_f32\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[32,32]},"
      "\"scalar_f32\":{\"dtype\":\"F32\",\"shape\":[],\"data_offsets\":[32,36]},"
      "\"weights\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[36,60]},"
      "\"counts\":{\"dtype\":\"I32\",\"shape\":[1,2,1,2,1],\"data_offsets\":[60,76]},"
      "\"bf16\":{\"dtype\":\"BF16\",\"shape\":[3,1],\"data_offsets\":[76,82]},"
      "\"empty_bf16\":{\"dtype\":\"BF16\",\"shape\":[0],\"data_offsets\":[82,82]},"
      "\"tokens\":{\"dtype\":\"U16\",\"shape\":[2,2],\"data_offsets\":[82,90]},"
      "\"bytes\":{\"dtype\":\"U8\",\"shape\":[7],\"data_offsets\":[90,97]},"
      "\"empty_u8\":{\"dtype\":\"U8\",\"shape\":[0,5],\"data_offsets\":[97,97]},"
      "\"one_byte\":{\"dtype\":\"U8\",\"shape\":[1,1,1],\"data_offsets\":[97,98]}}"))
      << header;
  EXPECT_EQ(file->size(), 8 + header_size + 98);
}

// Byte vectors from the reference implementation's own unit tests (safetensors/src/tensor.rs:
// test_serialization, test_serialization_forced_alignement and test_empty).
TEST_F(SafetensorsTest, MatchesTheReferenceImplementationsTestVectors) {
  std::vector<float> values = {0, 1, 2, 3, 4, 5};
  std::string data(reinterpret_cast<const char*>(values.data()), 24);

  Checkpoint attn;
  attn.tensors["attn.0"] = MakeTensor<float>(plan::FLOAT32, {1, 2, 3}, values);
  std::string expected =
      LittleEndian64(64) +
      "{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}" + data;
  EXPECT_EQ(*SerializeSafetensors(attn), expected);

  Checkpoint aligned;
  aligned.tensors["attn0"] = MakeTensor<float>(plan::FLOAT32, {1, 1, 2, 3}, values);
  expected = LittleEndian64(72) +
             "{\"attn0\":{\"dtype\":\"F32\",\"shape\":[1,1,2,3],\"data_offsets\":[0,24]}}       " +
             data;
  EXPECT_EQ(*SerializeSafetensors(aligned), expected);

  EXPECT_EQ(*SerializeSafetensors(Checkpoint()), LittleEndian64(8) + "{}      ");

  Checkpoint framework;
  framework.metadata["framework"] = "pt";
  EXPECT_EQ(*SerializeSafetensors(framework),
            LittleEndian64(40) + "{\"__metadata__\":{\"framework\":\"pt\"}}     ");
  for (const Checkpoint* checkpoint : {&attn, &aligned, &framework}) {
    absl::StatusOr<Checkpoint> parsed = ParseSafetensors(*SerializeSafetensors(*checkpoint));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    ExpectSameCheckpoint(*parsed, *checkpoint);
  }
}

TEST_F(SafetensorsTest, ReadsTheIndependentPythonReferenceFile) {
  std::string path = Path("reference.safetensors");
  WriteFile(path, ReferenceFile());
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, ReferenceCheckpoint());
}

TEST_F(SafetensorsTest, WritesThePythonReferenceFileByteForByte) {
  std::string path = Path("ours.safetensors");
  ASSERT_TRUE(WriteSafetensors(path, ReferenceCheckpoint()).ok());
  EXPECT_EQ(absl::BytesToHexString(ReadFile(path)), kReferenceHex);
}

TEST_F(SafetensorsTest, ReadsHeadersOtherWritersMayProduce) {
  std::string two_floats = "\x00\x00\x80\x3f\x00\x00\x00\x40"s;
  // Unpadded, with whitespace, tensors out of offset order, empty tensors at shared offsets,
  // metadata last, escapes in names.
  std::string header =
      "\n{ \"b\" : {\"shape\": [1], \"data_offsets\": [4, 8], \"dtype\": \"F32\"},\r\n"
      "\t\"\\u0061\\/x\": {\"dtype\": \"F32\", \"data_offsets\": [0, 4], \"shape\": [1]},"
      " \"e1\": {\"dtype\": \"U8\", \"shape\": [0], \"data_offsets\": [4, 4]},"
      " \"e2\": {\"dtype\": \"I64\", \"shape\": [2, 0], \"data_offsets\": [8, 8]},"
      " \"e3\": {\"dtype\": \"I32\", \"shape\": [0], \"data_offsets\": [0, 0]},"
      " \"__metadata__\": {}}\t";
  absl::StatusOr<Checkpoint> read = ParseSafetensors(FileOf(header, two_floats, /*pad=*/false));
  ASSERT_TRUE(read.ok()) << read.status();
  ASSERT_EQ(read->tensors.size(), 5u);
  EXPECT_EQ(read->tensors.at("a/x").Values<float>()[0], 1.0f);
  EXPECT_EQ(read->tensors.at("b").Values<float>()[0], 2.0f);
  EXPECT_TRUE(read->tensors.at("e2").bytes.empty());
  EXPECT_EQ(read->tensors.at("e2").shape, Shape({2, 0}));
  EXPECT_TRUE(read->metadata.empty());
}

}  // namespace
}  // namespace loom::checkpoint
