#include "runtime/checkpoint/safetensors.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/data_type.h"

namespace loom::checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using namespace std::string_literals;

// ---------------------------------------------------------------------------------------------
// Helpers.

template <typename T>
HostTensor MakeTensor(plan::DataType data_type, Shape shape, const std::vector<T>& values) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::string Bytes(const HostTensor& tensor) {
  return std::string(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
}

void ExpectSameCheckpoint(const Checkpoint& actual, const Checkpoint& expected) {
  EXPECT_EQ(actual.metadata, expected.metadata);
  ASSERT_EQ(actual.tensors.size(), expected.tensors.size());
  for (const auto& [name, tensor] : expected.tensors) {
    auto it = actual.tensors.find(name);
    ASSERT_NE(it, actual.tensors.end()) << name;
    EXPECT_EQ(it->second.data_type, tensor.data_type) << name;
    EXPECT_EQ(it->second.shape, tensor.shape) << name << ": " << it->second.shape.ToString();
    EXPECT_EQ(Bytes(it->second), Bytes(tensor)) << name;
  }
}

std::string LittleEndian64(uint64_t value) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

// A file of `header` (padded with spaces to a multiple of 8 when `pad`) and `data`.
std::string FileOf(std::string header, const std::string& data = "", bool pad = true) {
  if (pad) header.append((8 - header.size() % 8) % 8, ' ');
  return LittleEndian64(header.size()) + header + data;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream contents;
  contents << in.rdbuf();
  return contents.str();
}

void WriteFile(const std::string& path, const std::string& contents) {
  // A new file rather than a truncated one: ext4 flushes files truncated and rewritten on close,
  // which made the corruption loop take seconds.
  std::filesystem::remove(path);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << contents;
  ASSERT_TRUE(out.good()) << path;
}

std::vector<std::string> ListDirectory(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Each test gets a fresh directory, removed afterwards.
class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ =
        absl::StrCat(::testing::TempDir(), "loom_checkpoint_test_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  std::string Path(const std::string& name) const { return absl::StrCat(directory_, "/", name); }

  std::string directory_;
};

// Tensors of every supported data type: scalars, empty tensors, several ranks.
Checkpoint MixedCheckpoint() {
  Checkpoint checkpoint;
  checkpoint.tensors["weights"] =
      MakeTensor<float>(plan::FLOAT32, {2, 3}, {1.0f, -2.5f, 3.25f, 0.0f, -0.0f, 1e-30f});
  checkpoint.tensors["scalar_f32"] = MakeTensor<float>(plan::FLOAT32, {}, {42.0f});
  checkpoint.tensors["step"] = MakeTensor<int64_t>(plan::INT64, {}, {INT64_MIN});
  checkpoint.tensors["indices"] = MakeTensor<int64_t>(plan::INT64, {3}, {0, -1, INT64_MAX});
  checkpoint.tensors["counts"] =
      MakeTensor<int32_t>(plan::INT32, {1, 2, 1, 2, 1}, {INT32_MIN, -1, 0, INT32_MAX});
  checkpoint.tensors["bytes"] =
      MakeTensor<uint8_t>(plan::UINT8, {7}, {0, 1, 2, 127, 128, 254, 255});
  checkpoint.tensors["one_byte"] = MakeTensor<uint8_t>(plan::UINT8, {1, 1, 1}, {9});
  checkpoint.tensors["tokens"] = MakeTensor<uint16_t>(plan::UINT16, {2, 2}, {0, 1, 50000, 65535});
  checkpoint.tensors["bf16"] =
      MakeTensor<uint16_t>(plan::BFLOAT16, {3, 1}, {0x3F80, 0xC000, 0x7FC0});
  checkpoint.tensors["empty_f32"] = MakeTensor<float>(plan::FLOAT32, {0}, {});
  checkpoint.tensors["empty_i64"] = MakeTensor<int64_t>(plan::INT64, {3, 0, 2}, {});
  checkpoint.tensors["empty_u8"] = MakeTensor<uint8_t>(plan::UINT8, {0, 5}, {});
  checkpoint.tensors["empty_bf16"] = MakeTensor<uint16_t>(plan::BFLOAT16, {0}, {});
  checkpoint.metadata = {{"format", "pt"},
                         {"loom.step", "17"},
                         {"", "empty key"},
                         {"unicode \xe2\x9c\x93", "tab\there \"quoted\" \\ \x01"}};
  return checkpoint;
}

// The checkpoint make_reference.py writes (REFERENCE_TENSORS and REFERENCE_METADATA there).
Checkpoint ReferenceCheckpoint() {
  Checkpoint checkpoint;
  checkpoint.metadata = {{"format", "pt"},
                         {"step", "1200"},
                         {"note", "caf\xc3\xa9 \"quoted\" \\ back\nslash\ttab\x01\x7f"}};
  checkpoint.tensors["embedding.weight"] = MakeTensor<float>(
      plan::FLOAT32, {2, 3},
      {0.0f, 1.5f, -2.25f, 1024.0f, -0.0f, std::numeric_limits<float>::infinity()});
  checkpoint.tensors["step"] = MakeTensor<int64_t>(plan::INT64, {}, {1234567890123});
  checkpoint.tensors["token_ids"] = MakeTensor<int32_t>(plan::INT32, {4}, {-1, 0, 7, 2147483647});
  checkpoint.tensors["mask"] = MakeTensor<uint8_t>(plan::UINT8, {5}, {0, 1, 1, 0, 255});
  checkpoint.tensors["counts"] = MakeTensor<uint16_t>(plan::UINT16, {2, 2}, {0, 1, 65535, 300});
  checkpoint.tensors["bias"] = MakeTensor<uint16_t>(plan::BFLOAT16, {3}, {0x3F80, 0xC000, 0x7F80});
  checkpoint.tensors["empty"] = MakeTensor<float>(plan::FLOAT32, {0, 4}, {});
  checkpoint.tensors
      ["gr\xc3\xb6\xc3\x9f"
       "e"] = MakeTensor<int64_t>(plan::INT64, {1, 1}, {-5});
  checkpoint.tensors["odd \"name\" \\"] = MakeTensor<float>(plan::FLOAT32, {1}, {0.5f});
  return checkpoint;
}

// `make_reference.py hex`: the bytes make_reference.py writes for ReferenceCheckpoint().
constexpr char kReferenceHex[] =
    "98020000000000007b225f5f6d657461646174615f5f223a7b22666f726d6174"
    "223a227074222c226e6f7465223a22636166c3a9205c2271756f7465645c2220"
    "5c5c206261636b5c6e736c6173685c747461625c75303030317f222c22737465"
    "70223a2231323030227d2c226772c3b6c39f65223a7b226474797065223a2249"
    "3634222c227368617065223a5b312c315d2c22646174615f6f66667365747322"
    "3a5b302c385d7d2c2273746570223a7b226474797065223a22493634222c2273"
    "68617065223a5b5d2c22646174615f6f666673657473223a5b382c31365d7d2c"
    "22656d62656464696e672e776569676874223a7b226474797065223a22463332"
    "222c227368617065223a5b322c335d2c22646174615f6f666673657473223a5b"
    "31362c34305d7d2c22656d707479223a7b226474797065223a22463332222c22"
    "7368617065223a5b302c345d2c22646174615f6f666673657473223a5b34302c"
    "34305d7d2c226f6464205c226e616d655c22205c5c223a7b226474797065223a"
    "22463332222c227368617065223a5b315d2c22646174615f6f66667365747322"
    "3a5b34302c34345d7d2c22746f6b656e5f696473223a7b226474797065223a22"
    "493332222c227368617065223a5b345d2c22646174615f6f666673657473223a"
    "5b34342c36305d7d2c2262696173223a7b226474797065223a2242463136222c"
    "227368617065223a5b335d2c22646174615f6f666673657473223a5b36302c36"
    "365d7d2c22636f756e7473223a7b226474797065223a22553136222c22736861"
    "7065223a5b322c325d2c22646174615f6f666673657473223a5b36362c37345d"
    "7d2c226d61736b223a7b226474797065223a225538222c227368617065223a5b"
    "355d2c22646174615f6f666673657473223a5b37342c37395d7d7d2020202020"
    "fbffffffffffffffcb04fb711f010000000000000000c03f000010c000008044"
    "000000800000807f0000003fffffffff0000000007000000ffffff7f803f00c0"
    "807f00000100ffff2c0100010100ff";

std::string ReferenceFile() { return absl::HexStringToBytes(kReferenceHex); }

// ---------------------------------------------------------------------------------------------
// Round trips and layout.

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

// ---------------------------------------------------------------------------------------------
// Interoperability with the independent Python implementation (make_reference.py).

struct CommandResult {
  int exit_code = -1;
  std::string output;  // stdout
};

CommandResult RunCommand(const std::string& command) {
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char buffer[4096];
  size_t count;
  while ((count = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0)
    result.output.append(buffer, count);
  int status = ::pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

std::string PythonCommand(const std::string& arguments) {
  return absl::StrCat("'", LOOM_CHECKPOINT_PYTHON, "' '", LOOM_CHECKPOINT_REFERENCE_SCRIPT, "' ",
                      arguments);
}

// What `make_reference.py check` prints for a file holding `checkpoint`.
std::string PythonSummary(const Checkpoint& checkpoint) {
  std::vector<std::string> lines;
  for (const auto& [key, value] : checkpoint.metadata) {
    lines.push_back(
        absl::StrCat("metadata ", absl::BytesToHexString(key), " ", absl::BytesToHexString(value)));
  }
  for (const auto& [name, tensor] : checkpoint.tensors) {
    lines.push_back(absl::StrCat("tensor ", absl::BytesToHexString(name), " ",
                                 *SafetensorsDtype(tensor.data_type), " [",
                                 absl::StrJoin(tensor.shape.dimensions(), ","), "] ",
                                 absl::BytesToHexString(Bytes(tensor))));
  }
  std::sort(lines.begin(), lines.end());
  std::string summary;
  for (const std::string& line : lines) absl::StrAppend(&summary, line, "\n");
  return summary;
}

class PythonInteropTest : public SafetensorsTest {
 protected:
  void SetUp() override {
    SafetensorsTest::SetUp();
    if (::access(LOOM_CHECKPOINT_PYTHON, X_OK) != 0) {
      GTEST_SKIP() << LOOM_CHECKPOINT_PYTHON << " is not there: skipping the Python checks";
    }
  }
};

TEST_F(PythonInteropTest, PythonWritesTheEmbeddedReferenceFile) {
  // Keeps kReferenceHex in step with make_reference.py.
  std::string path = Path("reference.safetensors");
  CommandResult result = RunCommand(PythonCommand(absl::StrCat("write '", path, "'")));
  ASSERT_EQ(result.exit_code, 0);
  EXPECT_EQ(absl::BytesToHexString(ReadFile(path)), kReferenceHex);
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  ASSERT_TRUE(read.ok()) << read.status();
  ExpectSameCheckpoint(*read, ReferenceCheckpoint());
}

TEST_F(PythonInteropTest, PythonReadsWhatWeWrite) {
  Checkpoint large;
  std::vector<int32_t> values(300'000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<int32_t>(i * 2654435761u);
  large.tensors["big"] = MakeTensor<int32_t>(plan::INT32, {300, 1000}, values);
  large.tensors["small"] = MakeTensor<uint8_t>(plan::UINT8, {3}, {1, 2, 3});
  Checkpoint names;
  names.tensors["\xf0\x9f\x98\x80/\"x\"\\\n\x1f"] = MakeTensor<uint8_t>(plan::UINT8, {1}, {7});
  names.tensors[""] = MakeTensor<int64_t>(plan::INT64, {}, {-7});
  names.metadata["k\x7f\t"] = "v\xc3\xa9\r\b\f";

  int index = 0;
  for (const Checkpoint& checkpoint :
       {ReferenceCheckpoint(), MixedCheckpoint(), Checkpoint(), large, names}) {
    SCOPED_TRACE(index);
    std::string path = Path(absl::StrCat("ours", index++, ".safetensors"));
    ASSERT_TRUE(WriteSafetensors(path, checkpoint).ok());
    CommandResult result = RunCommand(PythonCommand(absl::StrCat("check '", path, "'")));
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_EQ(result.output, PythonSummary(checkpoint));
  }
}

TEST_F(PythonInteropTest, PythonCheckerRejectsABrokenFile) {
  // The checker is strict too (or PythonReadsWhatWeWrite would prove little).
  std::string path = Path("broken.safetensors");
  std::string file = ReferenceFile();
  WriteFile(path, file.substr(0, file.size() - 1));
  EXPECT_EQ(RunCommand(PythonCommand(absl::StrCat("check '", path, "' 2>/dev/null"))).exit_code, 1);
}

// ---------------------------------------------------------------------------------------------
// Writer errors and atomicity.

TEST_F(SafetensorsTest, RejectsTensorsItCannotWrite) {
  struct Case {
    const char* what;
    Checkpoint checkpoint;
    const char* message;
  };
  std::vector<Case> cases;
  auto add = [&](const char* what, const std::string& name, HostTensor tensor,
                 const char* message) {
    Checkpoint checkpoint;
    checkpoint.tensors[name] = std::move(tensor);
    cases.push_back({what, std::move(checkpoint), message});
  };
  add("too few bytes", "w", MakeTensor<float>(plan::FLOAT32, {2, 2}, {1, 2, 3}),
      "tensor 'w' is float32[2, 2], 16 bytes, but holds 12 bytes");
  add("too many bytes", "w", MakeTensor<uint8_t>(plan::UINT8, {}, {1, 2}),
      "tensor 'w' is uint8[], 1 bytes, but holds 2 bytes");
  add("unspecified type", "w", MakeTensor<float>(plan::DATA_TYPE_UNSPECIFIED, {1}, {1}),
      "tensor 'w' has data type unspecified, which safetensors cannot store");
  add("negative dimension", "w", MakeTensor<float>(plan::FLOAT32, {-1, 2}, {}),
      "tensor 'w' has a negative dimension: shape [-1, 2]");
  add("huge shape", "w", MakeTensor<float>(plan::FLOAT32, {INT64_MAX, 2}, {}),
      "tensor 'w' has shape [9223372036854775807, 2], too large to store");
  add("reserved name", "__metadata__", MakeTensor<float>(plan::FLOAT32, {1}, {1}),
      "a tensor cannot be named __metadata__");
  add("invalid UTF-8 name", "bad\xff", MakeTensor<float>(plan::FLOAT32, {1}, {1}),
      "the name of tensor 'bad\\xff' is not valid UTF-8");
  Checkpoint bad_metadata;
  bad_metadata.metadata["key"] = "bad\xc3";
  cases.push_back({"invalid UTF-8 metadata", bad_metadata, "metadata entry 'key'"});

  std::string path = Path("out.safetensors");
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    absl::Status status = WriteSafetensors(path, c.checkpoint);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), AllOf(HasSubstr(path), HasSubstr(c.message)));
    EXPECT_EQ(SerializeSafetensors(c.checkpoint).status().code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(ListDirectory(directory_).empty());
  }
}

TEST_F(SafetensorsTest, WritesAtomicallyAndLeavesNoTemporaryFiles) {
  std::string path = Path("model.safetensors");
  Checkpoint first = MixedCheckpoint();
  ASSERT_TRUE(WriteSafetensors(path, first).ok());
  Checkpoint second = ReferenceCheckpoint();
  ASSERT_TRUE(WriteSafetensors(path, second).ok());  // replaces the file
  EXPECT_EQ(ListDirectory(directory_), std::vector<std::string>{"model.safetensors"});
  ExpectSameCheckpoint(*ReadSafetensors(path), second);

  // A failed write leaves the old file as it was.
  Checkpoint invalid;
  invalid.tensors["w"] = MakeTensor<float>(plan::FLOAT32, {2}, {1});
  EXPECT_FALSE(WriteSafetensors(path, invalid).ok());
  EXPECT_EQ(ListDirectory(directory_), std::vector<std::string>{"model.safetensors"});
  ExpectSameCheckpoint(*ReadSafetensors(path), second);

  // A relative path writes into the current directory.
  std::filesystem::path old_directory = std::filesystem::current_path();
  std::filesystem::current_path(directory_);
  absl::Status status = WriteSafetensors("relative.safetensors", first);
  std::filesystem::current_path(old_directory);
  ASSERT_TRUE(status.ok()) << status;
  ExpectSameCheckpoint(*ReadSafetensors(Path("relative.safetensors")), first);
}

TEST_F(SafetensorsTest, StreamedWritesAreTheSameFileOneTensorAtATime) {
  const Checkpoint mixed = MixedCheckpoint();
  std::map<std::string, SafetensorsTensorInfo> tensors;
  for (const auto& [name, tensor] : mixed.tensors) {
    tensors[name] = SafetensorsTensorInfo{tensor.data_type, tensor.shape};
  }
  std::vector<std::string> asked;
  const std::string path = Path("streamed.safetensors");
  absl::Status status = WriteSafetensorsStreamed(
      path, tensors, mixed.metadata, [&](const std::string& name) -> absl::StatusOr<HostTensor> {
        asked.push_back(name);
        return mixed.tensors.at(name);
      });
  ASSERT_TRUE(status.ok()) << status;
  EXPECT_EQ(ReadFile(path), *SerializeSafetensors(mixed));
  // Each tensor once, in the file's data order (descending alignment, then name).
  EXPECT_EQ(asked.size(), mixed.tensors.size());
  EXPECT_EQ(asked.front(), "empty_i64");
  EXPECT_EQ(asked.back(), "one_byte");

  // A source error, or a tensor other than announced, leaves the old file and no temporary one.
  status = WriteSafetensorsStreamed(path, tensors, mixed.metadata,
                                    [](const std::string& name) -> absl::StatusOr<HostTensor> {
                                      return absl::NotFoundError("no piece of " + name);
                                    });
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("no piece of empty_i64"));
  status = WriteSafetensorsStreamed(
      path, tensors, mixed.metadata, [&](const std::string& name) -> absl::StatusOr<HostTensor> {
        if (name == "weights") return MakeTensor<float>(plan::FLOAT32, {3, 2}, {0, 1, 2, 3, 4, 5});
        return mixed.tensors.at(name);
      });
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'weights' is float32[3, 2], not the float32[2, 3]"));
  EXPECT_EQ(ListDirectory(directory_), std::vector<std::string>{"streamed.safetensors"});
  EXPECT_EQ(ReadFile(path), *SerializeSafetensors(mixed));
}

TEST_F(SafetensorsTest, ReportsIoErrors) {
  absl::Status status = WriteSafetensors(Path("missing/dir/model.safetensors"), MixedCheckpoint());
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(Path("missing/dir/model.safetensors")));
  EXPECT_TRUE(ListDirectory(directory_).empty());

  // Renaming over a directory fails; the temporary file is removed.
  std::filesystem::create_directory(Path("a_directory"));
  status = WriteSafetensors(Path("a_directory"), MixedCheckpoint());
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("cannot rename"));
  EXPECT_EQ(ListDirectory(directory_), std::vector<std::string>{"a_directory"});

  absl::StatusOr<Checkpoint> read = ReadSafetensors(Path("nonexistent.safetensors"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(),
              AllOf(HasSubstr("cannot open"), HasSubstr(Path("nonexistent.safetensors"))));

  read = ReadSafetensors(Path("a_directory"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr("not a regular file"));
}

// ---------------------------------------------------------------------------------------------
// Malformed files.

struct MalformedCase {
  const char* what;
  std::string contents;
  absl::StatusCode code;
  std::vector<std::string> message_parts;
};

std::string Entry(const std::string& name, const std::string& dtype, const std::string& shape,
                  const std::string& offsets) {
  return absl::StrCat("\"", name, "\":{\"dtype\":\"", dtype, "\",\"shape\":", shape,
                      ",\"data_offsets\":", offsets, "}");
}

std::vector<MalformedCase> MalformedCases() {
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  const std::string valid = ReferenceFile();
  const std::string w4 = Entry("w", "U8", "[4]", "[0,4]");
  const std::string four = "abcd";
  std::vector<MalformedCase> cases = {
      // The file and the header length.
      {"empty file", "", kInvalid, {"truncated", "has 0 bytes"}},
      {"7 bytes", "\x08\x00\x00\x00\x00\x00\x00"s, kInvalid, {"truncated", "has 7 bytes"}},
      {"header past the end",
       LittleEndian64(100) + "{}",
       kInvalid,
       {"header length 100 runs past the end of the file, which has 2 bytes"}},
      {"header length 2^64-1",
       "\xff\xff\xff\xff\xff\xff\xff\xff{}"s,
       kInvalid,
       {"header length 18446744073709551615 runs past the end"}},
      {"header cut short", valid.substr(0, 100), kInvalid, {"runs past the end of the file"}},
      {"data cut short",
       valid.substr(0, valid.size() - 3),
       kInvalid,
       {"data_offsets [74, 79] of tensor 'mask' run past the end of the data, which has 76 bytes"}},
      {"data cut off entirely",
       valid.substr(0, 8 + 664),
       kInvalid,
       {"run past the end of the data"}},
      {"trailing bytes",
       valid + "xyz",
       kInvalid,
       {"the last 3 of the 82 bytes of data belong to no tensor"}},
      // The JSON.
      {"empty header",
       LittleEndian64(0),
       kInvalid,
       {"bad header: invalid JSON at byte ", "expected a value"}},
      {"spaces only", FileOf("        "), kInvalid, {"bad header: invalid JSON at byte "}},
      {"not JSON",
       FileOf("hello"),
       kInvalid,
       {"bad header: invalid JSON at byte 0: expected a value"}},
      {"trailing comma",
       FileOf("{" + w4 + ",}", four),
       kInvalid,
       {"bad header: invalid JSON at byte "}},
      {"single quotes", FileOf("{'w':{}}"), kInvalid, {"bad header: invalid JSON at byte "}},
      {"two values", FileOf("{}{}"), kInvalid, {"unexpected data after the JSON value"}},
      {"NUL padding",
       FileOf("{}\0\0\0\0\0\0"s, "", false),
       kInvalid,
       {"unexpected data after the JSON value"}},
      {"top-level array", FileOf("[]"), kInvalid, {"must be a JSON object, not an array"}},
      {"top-level string", FileOf("\"{}\""), kInvalid, {"must be a JSON object, not a string"}},
      {"invalid UTF-8 name",
       FileOf("{" + Entry("w\xff", "U8", "[4]", "[0,4]") + "}", four),
       kInvalid,
       {"invalid UTF-8"}},
      {"raw control character",
       FileOf("{" + Entry("w\n", "U8", "[4]", "[0,4]") + "}", four),
       kInvalid,
       {"control characters"}},
      {"lone surrogate",
       FileOf("{" + Entry("\\ud800", "U8", "[4]", "[0,4]") + "}", four),
       kInvalid,
       {"unpaired high surrogate"}},
      {"NaN offset",
       FileOf("{" + Entry("w", "U8", "[4]", "[0,NaN]") + "}", four),
       kInvalid,
       {"bad header: invalid JSON at byte "}},
      {"nesting bomb",
       FileOf("{\"__metadata__\":" + std::string(100'000, '[')),
       kInvalid,
       {"nesting deeper than 64 levels"}},
      {"duplicate tensor",
       FileOf("{" + w4 + "," + Entry("w", "U8", "[0]", "[4,4]") + "}", four),
       kInvalid,
       {"duplicate key \"w\""}},
      {"duplicate field",
       FileOf("{\"w\":{\"dtype\":\"U8\",\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}",
              four),
       kInvalid,
       {"duplicate key \"dtype\""}},
      {"duplicate metadata",
       FileOf("{\"__metadata__\":{},\"__metadata__\":{}}"),
       kInvalid,
       {"duplicate key \"__metadata__\""}},
      // Fields.
      {"entry not an object",
       FileOf("{\"w\":[0,4]}", four),
       kInvalid,
       {"the header entry of tensor 'w' must be an object, not an array"}},
      {"missing dtype",
       FileOf("{\"w\":{\"shape\":[4],\"data_offsets\":[0,4]}}", four),
       kInvalid,
       {"tensor 'w' lacks the field dtype"}},
      {"missing shape",
       FileOf("{\"w\":{\"dtype\":\"U8\",\"data_offsets\":[0,4]}}", four),
       kInvalid,
       {"tensor 'w' lacks the field shape"}},
      {"missing data_offsets",
       FileOf("{\"w\":{\"dtype\":\"U8\",\"shape\":[4]}}", four),
       kInvalid,
       {"tensor 'w' lacks the field data_offsets"}},
      {"unknown field",
       FileOf("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4],\"stride\":[1]}}",
              four),
       kInvalid,
       {"tensor 'w' has an unknown field 'stride'"}},
      {"dtype not a string",
       FileOf("{\"w\":{\"dtype\":4,\"shape\":[4],\"data_offsets\":[0,4]}}", four),
       kInvalid,
       {"the dtype of tensor 'w' must be a string, not the number 4"}},
      {"unknown dtype",
       FileOf("{" + Entry("w", "F99", "[4]", "[0,4]") + "}", four),
       kInvalid,
       {"tensor 'w'", "unknown dtype 'F99'"}},
      {"lowercase dtype",
       FileOf("{" + Entry("w", "f32", "[1]", "[0,4]") + "}", four),
       kInvalid,
       {"tensor 'w'", "unknown dtype 'f32'"}},
      {"unsupported F16",
       FileOf("{" + Entry("half", "F16", "[2]", "[0,4]") + "}", four),
       absl::StatusCode::kUnimplemented,
       {"tensor 'half'", "dtype F16 is not supported by Loom", "F32, I32, I64, U8, U16, BF16"}},
      {"unsupported BOOL",
       FileOf("{" + Entry("flags", "BOOL", "[4]", "[0,4]") + "}", four),
       absl::StatusCode::kUnimplemented,
       {"tensor 'flags'", "dtype BOOL"}},
      {"shape not an array",
       FileOf("{" + Entry("w", "U8", "4", "[0,4]") + "}", four),
       kInvalid,
       {"the shape of tensor 'w' must be an array, not the number 4"}},
      {"negative dimension",
       FileOf("{" + Entry("w", "U8", "[-4]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[0] of tensor 'w' must be a non-negative integer", "not the number -4"}},
      {"fractional dimension",
       FileOf("{" + Entry("w", "U8", "[2,1.5]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[1] of tensor 'w'", "not the number 1.5"}},
      {"exponent dimension",
       FileOf("{" + Entry("w", "U8", "[4e0]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[0] of tensor 'w'", "not the number 4e0"}},
      {"string dimension",
       FileOf("{" + Entry("w", "U8", "[\"4\"]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[0] of tensor 'w'", "not a string"}},
      {"dimension past 2^64",
       FileOf("{" + Entry("w", "U8", "[18446744073709551616]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[0] of tensor 'w' must be a non-negative integer below 2^64"}},
      {"dimension past 2^63",
       FileOf("{" + Entry("w", "U8", "[9223372036854775808]", "[0,4]") + "}", four),
       kInvalid,
       {"shape[0] of tensor 'w' is 9223372036854775808, more than 2^63 - 1"}},
      {"shape overflow",
       FileOf("{" + Entry("w", "F32", "[4294967296,4294967296,4]", "[0,4]") + "}", four),
       kInvalid,
       {"tensor 'w' has shape [4294967296, 4294967296, 4], whose size in bytes exceeds 2^63 - 1"}},
      {"byte size overflow",
       FileOf("{" + Entry("w", "I64", "[2305843009213693952]", "[0,4]") + "}", four),
       kInvalid,
       {"whose size in bytes exceeds"}},
      {"overflow before a zero",
       FileOf("{" + Entry("w", "U8", "[4294967296,4294967296,0]", "[0,0]") + "}"),
       kInvalid,
       {"whose size in bytes exceeds"}},
      {"offsets not an array",
       FileOf("{" + Entry("w", "U8", "[4]", "4") + "}", four),
       kInvalid,
       {"the data_offsets of tensor 'w' must be an array of 2 integers", "not the number 4"}},
      {"one offset",
       FileOf("{" + Entry("w", "U8", "[4]", "[4]") + "}", four),
       kInvalid,
       {"not an array of 1"}},
      {"three offsets",
       FileOf("{" + Entry("w", "U8", "[4]", "[0,4,4]") + "}", four),
       kInvalid,
       {"not an array of 3"}},
      {"negative offset",
       FileOf("{" + Entry("w", "U8", "[4]", "[-1,3]") + "}", four),
       kInvalid,
       {"data_offsets[0] of tensor 'w' must be a non-negative integer"}},
      {"null offset",
       FileOf("{" + Entry("w", "U8", "[4]", "[0,null]") + "}", four),
       kInvalid,
       {"data_offsets[1] of tensor 'w'", "not null"}},
      {"metadata not an object",
       FileOf("{\"__metadata__\":[]}"),
       kInvalid,
       {"__metadata__ must be an object, not an array"}},
      {"metadata value not a string",
       FileOf("{\"__metadata__\":{\"step\":5}}"),
       kInvalid,
       {"__metadata__ values must be strings, but 'step' is the number 5"}},
      // Offsets.
      {"end before begin",
       FileOf("{" + Entry("w", "U8", "[4]", "[4,0]") + "}", four),
       kInvalid,
       {"the data_offsets [4, 0] of tensor 'w' end before they begin"}},
      {"size mismatch",
       FileOf("{" + Entry("w", "F32", "[2]", "[0,4]") + "}", four),
       kInvalid,
       {"tensor 'w' is F32[2], 8 bytes, but its data_offsets [0, 4] span 4 bytes"}},
      {"scalar size mismatch",
       FileOf("{" + Entry("w", "I64", "[]", "[0,4]") + "}", four),
       kInvalid,
       {"tensor 'w' is I64[], 8 bytes"}},
      {"out of range",
       FileOf("{" + Entry("w", "U8", "[4]", "[2,6]") + "}", four),
       kInvalid,
       {"the data_offsets [2, 6] of tensor 'w' run past the end of the data, which has 4 bytes"}},
      {"huge offsets",
       FileOf("{" + Entry("w", "U8", "[4]", "[18446744073709551612,18446744073709551615]") + "}",
              four),
       kInvalid,
       {"tensor 'w' is U8[4], 4 bytes, but its data_offsets"}},
      {"huge offsets of the right size",
       FileOf("{" + Entry("w", "U8", "[4]", "[18446744073709551611,18446744073709551615]") + "}",
              four),
       kInvalid,
       {"run past the end of the data"}},
      {"empty tensor past the end",
       FileOf("{" + Entry("e", "F32", "[0]", "[9,9]") + "}"),
       kInvalid,
       {"the data_offsets [9, 9] of tensor 'e' run past the end of the data"}},
      {"overlap",
       FileOf("{" + Entry("a", "U8", "[4]", "[0,4]") + "," + Entry("b", "U8", "[4]", "[2,6]") + "}",
              "abcdef"),
       kInvalid,
       {"the data_offsets [2, 6] of tensor 'b' overlap those of tensor 'a', [0, 4]"}},
      {"same offsets",
       FileOf("{" + Entry("a", "U8", "[4]", "[0,4]") + "," + Entry("b", "U8", "[4]", "[0,4]") + "}",
              four),
       kInvalid,
       {"of tensor 'b' overlap those of tensor 'a'"}},
      {"empty tensor inside another",
       FileOf("{" + Entry("a", "U8", "[4]", "[0,4]") + "," + Entry("e", "U8", "[0]", "[2,2]") + "}",
              four),
       kInvalid,
       {"the data_offsets [2, 2] of tensor 'e' overlap those of tensor 'a'"}},
      {"gap",
       FileOf("{" + Entry("a", "U8", "[2]", "[0,2]") + "," + Entry("b", "U8", "[2]", "[4,6]") + "}",
              "abcdef"),
       kInvalid,
       {"bytes [2, 4) of the data belong to no tensor (tensor 'b' begins at 4)"}},
      {"not starting at 0",
       FileOf("{" + Entry("a", "U8", "[2]", "[2,4]") + "}", four),
       kInvalid,
       {"bytes [0, 2) of the data belong to no tensor"}},
      {"bytes after the last tensor",
       FileOf("{" + Entry("a", "U8", "[2]", "[0,2]") + "}", four),
       kInvalid,
       {"the last 2 of the 4 bytes of data belong to no tensor"}},
      {"data but no tensors",
       FileOf("{}", four),
       kInvalid,
       {"the last 4 of the 4 bytes of data belong to no tensor"}},
  };
  return cases;
}

TEST_F(SafetensorsTest, RejectsEveryMalformedFileClearly) {
  std::string path = Path("malformed.safetensors");
  for (const MalformedCase& c : MalformedCases()) {
    SCOPED_TRACE(c.what);
    WriteFile(path, c.contents);
    absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
    EXPECT_EQ(read.status().code(), c.code) << read.status();
    EXPECT_THAT(read.status().message(), HasSubstr("'" + path + "': "));
    for (const std::string& part : c.message_parts) {
      EXPECT_THAT(read.status().message(), HasSubstr(part));
    }
    absl::StatusOr<Checkpoint> parsed = ParseSafetensors(c.contents, "in memory");
    EXPECT_EQ(parsed.status().code(), c.code);
    EXPECT_THAT(parsed.status().message(), HasSubstr("'in memory': "));
  }
}

TEST_F(SafetensorsTest, RejectsHeadersOverTheLimitWithoutReadingThem) {
  // A sparse file: the header length is checked before the header is read.
  std::string path = Path("huge_header.safetensors");
  WriteFile(path, LittleEndian64(kMaxSafetensorsHeaderSize + 1) + "{}");
  std::filesystem::resize_file(path, 8 + kMaxSafetensorsHeaderSize + 1);
  absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(),
              HasSubstr("the header length 100000001 exceeds the limit of 100000000 bytes"));
}

// Random corruptions of a valid file: each read must fail cleanly or succeed with consistent
// tensors; the file and memory readers must agree. Run under ASan/UBSan as well.
TEST_F(SafetensorsTest, SurvivesRandomCorruption) {
  const std::string valid = ReferenceFile();
  const size_t header_end = 8 + 664;
  const std::string interesting = "{}[]\",:0123456789-.eE \\u\x00\xff\xc3"s;
  std::mt19937_64 random(20240601);
  auto uniform = [&](size_t bound) { return static_cast<size_t>(random() % bound); };
  std::string path = Path("mutant.safetensors");
  int errors = 0;
  int successes = 0;
  for (int iteration = 0; iteration < 1000; ++iteration) {
    std::string file = valid;
    int mutations = 1 + static_cast<int>(uniform(3));
    for (int m = 0; m < mutations && !file.empty(); ++m) {
      switch (uniform(8)) {
        case 0:  // flip a bit anywhere
          file[uniform(file.size())] ^= static_cast<char>(1 << uniform(8));
          break;
        case 1:  // flip a bit in the length or header
          file[uniform(std::min(file.size(), header_end))] ^= static_cast<char>(1 << uniform(8));
          break;
        case 2:  // put a JSON-significant byte into the header
          file[uniform(std::min(file.size(), header_end))] =
              interesting[uniform(interesting.size())];
          break;
        case 3:  // truncate
          file.resize(uniform(file.size() + 1));
          break;
        case 4:  // append junk
          for (size_t n = 1 + uniform(16); n > 0; --n) file += static_cast<char>(random());
          break;
        case 5: {  // a new header length, near the old one or anything
          uint64_t length = uniform(2) == 0 ? 664 - 16 + uniform(33) : random();
          std::string encoded = LittleEndian64(length);
          file.replace(0, std::min<size_t>(8, file.size()), encoded);
          break;
        }
        case 6:  // delete a header byte
          file.erase(uniform(std::min(file.size(), header_end)), 1);
          break;
        case 7:  // duplicate a header range
          if (file.size() > 16) {
            size_t begin = 8 + uniform(std::min(file.size(), header_end) - 8);
            size_t length = uniform(std::min<size_t>(32, file.size() - begin) + 1);
            file.insert(begin, file.substr(begin, length));
          }
          break;
      }
    }
    WriteFile(path, file);
    absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
    absl::StatusOr<Checkpoint> parsed = ParseSafetensors(file);
    ASSERT_EQ(read.status().code(), parsed.status().code()) << read.status() << parsed.status();
    if (!read.ok()) {
      ++errors;
      ASSERT_TRUE(read.status().code() == absl::StatusCode::kInvalidArgument ||
                  read.status().code() == absl::StatusCode::kUnimplemented)
          << read.status();
      continue;
    }
    ++successes;
    for (const auto& [name, tensor] : read->tensors) {
      ASSERT_EQ(static_cast<int64_t>(tensor.bytes.size()),
                tensor.shape.NumElements() * DataTypeSize(tensor.data_type));
    }
    // What was read writes and reads back the same.
    absl::StatusOr<std::string> rewritten = SerializeSafetensors(*read);
    ASSERT_TRUE(rewritten.ok()) << rewritten.status();
    absl::StatusOr<Checkpoint> reread = ParseSafetensors(*rewritten);
    ASSERT_TRUE(reread.ok()) << reread.status();
    ExpectSameCheckpoint(*reread, *read);
  }
  EXPECT_GT(errors, 500);
  EXPECT_GT(successes, 10);  // data-only bit flips leave valid files
}

}  // namespace
}  // namespace loom::checkpoint
