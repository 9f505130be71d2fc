#ifndef LOOM_TESTS_CORE_SAFETENSORS_TEST_UTIL_H_
#define LOOM_TESTS_CORE_SAFETENSORS_TEST_UTIL_H_

// What the safetensors tests share: building tensors and raw files, reading and writing files,
// comparing checkpoints, the SafetensorsTest fixture (a fresh directory per test), and the two
// checkpoints the tests use: MixedCheckpoint (every data type, scalars, empty tensors) and
// ReferenceCheckpoint, with the bytes the independent Python writer (make_reference.py) makes
// of it.

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "gtest/gtest.h"

namespace loom::checkpoint {

template <typename T>
HostTensor MakeTensor(plan::DataType data_type, Shape shape, const std::vector<T>& values) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::string Bytes(const HostTensor& tensor);

void ExpectSameCheckpoint(const Checkpoint& actual, const Checkpoint& expected);

std::string LittleEndian64(uint64_t value);

// A file of `header` (padded with spaces to a multiple of 8 when `pad`) and `data`.
std::string FileOf(std::string header, const std::string& data = "", bool pad = true);

std::string ReadFile(const std::string& path);

void WriteFile(const std::string& path, const std::string& contents);

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
Checkpoint MixedCheckpoint();

// The checkpoint make_reference.py writes (REFERENCE_TENSORS and REFERENCE_METADATA there).
Checkpoint ReferenceCheckpoint();

// `make_reference.py hex`: the bytes make_reference.py writes for ReferenceCheckpoint().
extern const char kReferenceHex[];

std::string ReferenceFile();

}  // namespace loom::checkpoint

#endif  // LOOM_TESTS_CORE_SAFETENSORS_TEST_UTIL_H_
