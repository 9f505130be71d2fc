// Reading a whole file or part of one (core/file_contents.h): bytes as they are, and errors
// naming the path.
#include "core/file_contents.h"

#include <filesystem>
#include <fstream>
#include <limits>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_directory.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

class FileContentsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = loom::testing::FreshTestDirectory("file-contents");
    std::filesystem::create_directories(directory_);
  }

  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = (directory_ / name).string();
    std::ofstream(path, std::ios::binary) << bytes;
    return path;
  }

  std::filesystem::path directory_;
};

TEST_F(FileContentsTest, ReadsEveryByte) {
  std::string bytes("a\0b\nc", 5);
  bytes += std::string(200000, 'x');  // more than one read
  absl::StatusOr<std::string> read = ReadFileContents(Write("data.bin", bytes));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
  read = ReadFileContents(Write("empty", ""));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, "");
}

TEST_F(FileContentsTest, AMissingFileOrADirectoryIsAnErrorNamingThePath) {
  const std::string missing = (directory_ / "missing").string();
  absl::StatusOr<std::string> read = ReadFileContents(missing);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(),
              HasSubstr("cannot read '" + missing + "': No such file or directory"));
  read = ReadFileContents(directory_.string());
  EXPECT_EQ(read.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(read.status().message(), HasSubstr("Is a directory"));
}

TEST_F(FileContentsTest, APartIsThoseBytesWithTheFilesSize) {
  std::string bytes;
  for (int i = 0; i < 100000; ++i) bytes += static_cast<char>('a' + i % 26);
  const std::string path = Write("part.bin", bytes);
  absl::StatusOr<FilePart> part = ReadFilePart(path, 70000, 20000);
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->bytes, bytes.substr(70000, 20000));
  EXPECT_EQ(part->total_bytes, 100000);
  part = ReadFilePart(path, 95000, 20000);  // fewer at the end
  ASSERT_TRUE(part.ok()) << part.status();
  EXPECT_EQ(part->bytes, bytes.substr(95000));
  for (int64_t past : {int64_t{100000}, int64_t{100001}, std::numeric_limits<int64_t>::max() - 1}) {
    part = ReadFilePart(path, past, 10);
    ASSERT_TRUE(part.ok()) << part.status();
    EXPECT_EQ(part->bytes, "");
    EXPECT_EQ(part->total_bytes, 100000);
  }
  const std::string missing = (directory_ / "missing").string();
  EXPECT_EQ(ReadFilePart(missing, 0, 1).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom
