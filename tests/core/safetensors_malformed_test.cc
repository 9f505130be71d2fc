// Malformed safetensors files: every kind is rejected clearly, by the file and the memory reader
// alike; headers over the limit are not read; random corruptions fail cleanly.

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/data_type.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/safetensors_test_util.h"

namespace loom::checkpoint {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using namespace std::string_literals;

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
      // Issue 56: what is wrong, without the length read from the file or its size.
      {"empty file", "", kInvalid, {"truncated", "ends before the 8 bytes of the header length"}},
      {"7 bytes",
       "\x08\x00\x00\x00\x00\x00\x00"s,
       kInvalid,
       {"truncated", "ends before the 8 bytes of the header length"}},
      {"header past the end",
       LittleEndian64(100) + "{}",
       kInvalid,
       {"the header length field is not a plausible safetensors header length",
        "runs past the end of the file"}},
      {"header length 2^64-1",
       "\xff\xff\xff\xff\xff\xff\xff\xff{}"s,
       kInvalid,
       {"not a plausible safetensors header length"}},
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

// Issue 56: a file that is no safetensors file (here: text, or bytes whose first 8 read as a
// length) is refused saying what is wrong, without a byte of it, the length read, or its size.
TEST_F(SafetensorsTest, NoSafetensorsFileErrorsHoldNoBytesOfItNorItsSize) {
  std::string path = Path("notes.txt");
  for (const std::string& contents :
       {std::string("root:x:0:0:root:/root:/bin/bash\n"), LittleEndian64(12345) + "secret",
        LittleEndian64(20) + "{\"x\": secret value }    "}) {
    WriteFile(path, contents);
    absl::StatusOr<Checkpoint> read = ReadSafetensors(path);
    ASSERT_FALSE(read.ok());
    const std::string message = absl::StrReplaceAll(read.status().message(), {{path, "PATH"}});
    EXPECT_THAT(message, Not(HasSubstr("root")));
    EXPECT_THAT(message, Not(HasSubstr("secret")));
    EXPECT_THAT(message, Not(HasSubstr("12345")));
    EXPECT_THAT(message, Not(HasSubstr(absl::StrCat(contents.size()))));
    EXPECT_THAT(message, Not(HasSubstr("found")));
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
              HasSubstr("the header length field is not a plausible safetensors header length: it "
                        "exceeds the limit of 100000000 bytes"));
  EXPECT_THAT(read.status().message(), Not(HasSubstr("100000001")));
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
