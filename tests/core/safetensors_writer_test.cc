// Safetensors writer errors and atomicity: tensors it cannot write, atomic replacement with no
// temporary files left, streamed writes, and I/O errors.

#include <algorithm>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/safetensors_test_util.h"

namespace loom::checkpoint {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

std::vector<std::string> ListDirectory(const std::string& directory) {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(directory)) {
    names.push_back(entry.path().filename().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

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
  EXPECT_THAT(status.message(),
              HasSubstr("tensor 'weights' is float32[3, 2], not the float32[2, 3]"));
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

}  // namespace
}  // namespace loom::checkpoint
