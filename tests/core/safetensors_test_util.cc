#include "tests/core/safetensors_test_util.h"

#include <fstream>
#include <limits>
#include <sstream>

#include "absl/strings/escaping.h"

namespace loom::checkpoint {

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

std::string FileOf(std::string header, const std::string& data, bool pad) {
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

const char kReferenceHex[] =
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

}  // namespace loom::checkpoint
