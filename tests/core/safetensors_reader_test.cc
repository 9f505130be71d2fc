// SafetensorsReader: single tensors and windows of them, without loading the whole file.
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::checkpoint {
namespace {

using ::testing::HasSubstr;

template <typename T>
HostTensor Tensor(plan::DataType data_type, const Shape& shape) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  std::vector<T> values(shape.NumElements());
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<T>(3 * i + 1);
  tensor.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

// The window [begin, begin + shape) of `tensor`, element by element.
HostTensor Slice(const HostTensor& tensor, const std::vector<int64_t>& begin, const Shape& shape) {
  HostTensor window;
  window.data_type = tensor.data_type;
  window.shape = shape;
  const int64_t element_size =
      tensor.bytes.size() / std::max<int64_t>(1, tensor.shape.NumElements());
  const int rank = shape.rank();
  std::vector<int64_t> index(rank, 0);
  for (int64_t n = 0; n < shape.NumElements(); ++n) {
    int64_t source = 0;
    for (int axis = 0; axis < rank; ++axis) {
      source = source * tensor.shape.dimension(axis) + begin[axis] + index[axis];
    }
    const std::byte* from = tensor.bytes.data() + source * element_size;
    window.bytes.insert(window.bytes.end(), from, from + element_size);
    for (int axis = rank - 1; axis >= 0 && ++index[axis] == shape.dimension(axis); --axis) {
      index[axis] = 0;
    }
  }
  return window;
}

class SafetensorsReaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(::testing::TempDir(), "/loom_safetensors_reader_", ::getpid(), "_",
                         info->name(), ".safetensors");
    contents_.tensors["a"] = Tensor<float>(plan::FLOAT32, {3, 4, 5});
    contents_.tensors["b"] = Tensor<int64_t>(plan::INT64, {7});
    contents_.tensors["c"] = Tensor<uint16_t>(plan::BFLOAT16, {2, 6});
    contents_.metadata["format"] = "pt";
    ASSERT_TRUE(WriteSafetensors(path_, contents_).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::string path_;
  Checkpoint contents_;
};

TEST_F(SafetensorsReaderTest, HeaderAndWholeTensors) {
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->path(), path_);
  EXPECT_EQ((*reader)->metadata(), contents_.metadata);
  ASSERT_EQ((*reader)->tensors().size(), 3u);
  const SafetensorsTensorInfo* a = (*reader)->Find("a");
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->data_type, plan::FLOAT32);
  EXPECT_EQ(a->shape, Shape({3, 4, 5}));
  EXPECT_EQ((*reader)->Find("z"), nullptr);
  for (const auto& [name, expected] : contents_.tensors) {
    absl::StatusOr<HostTensor> tensor = (*reader)->ReadTensor(name);
    ASSERT_TRUE(tensor.ok()) << tensor.status();
    EXPECT_EQ(tensor->data_type, expected.data_type) << name;
    EXPECT_EQ(tensor->shape, expected.shape) << name;
    EXPECT_EQ(tensor->bytes, expected.bytes) << name;
  }
}

TEST_F(SafetensorsReaderTest, EveryWindowMatchesTheSliceOfTheWholeTensor) {
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::mt19937 engine(5);
  for (const auto& [name, whole] : contents_.tensors) {
    for (int trial = 0; trial < 60; ++trial) {
      std::vector<int64_t> begin;
      std::vector<int64_t> size;
      for (int64_t dimension : whole.shape.dimensions()) {
        const int64_t b = std::uniform_int_distribution<int64_t>(0, dimension)(engine);
        begin.push_back(b);
        size.push_back(std::uniform_int_distribution<int64_t>(0, dimension - b)(engine));
      }
      absl::StatusOr<HostTensor> window = (*reader)->ReadWindow(name, begin, Shape(size));
      ASSERT_TRUE(window.ok()) << window.status();
      EXPECT_EQ(window->shape, Shape(size));
      EXPECT_EQ(window->bytes, Slice(whole, begin, Shape(size)).bytes)
          << name << " at " << Shape(begin).ToString() << " size " << Shape(size).ToString();
    }
  }
}

TEST_F(SafetensorsReaderTest, BadRequestsAreErrors) {
  absl::StatusOr<std::unique_ptr<SafetensorsReader>> reader = SafetensorsReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<HostTensor> missing = (*reader)->ReadTensor("zz");
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.status().message(),
              HasSubstr(absl::StrCat("checkpoint '", path_, "' has no tensor 'zz'")));
  absl::StatusOr<HostTensor> outside = (*reader)->ReadWindow("a", {1, 0, 0}, Shape({3, 4, 5}));
  EXPECT_EQ(outside.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(outside.status().message(), HasSubstr("does not lie inside the tensor (axis 0)"));
  EXPECT_THAT(outside.status().message(), HasSubstr("tensor 'a'"));
  absl::StatusOr<HostTensor> rank = (*reader)->ReadWindow("a", {0, 0}, Shape({3, 4}));
  EXPECT_EQ(rank.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ((*reader)->ReadWindow("b", {-1}, Shape({1})).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsReaderTest, OpenRejectsWhatReadSafetensorsRejects) {
  // Truncate the file by one byte: the tensors no longer tile the data.
  std::ifstream in(path_, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  in.close();
  {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() - 1));
  }
  absl::Status whole = ReadSafetensors(path_).status();
  absl::Status header = SafetensorsReader::Open(path_).status();
  EXPECT_FALSE(whole.ok());
  EXPECT_EQ(header, whole);

  EXPECT_EQ(SafetensorsReader::Open(path_ + ".missing").status().code(),
            absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace loom::checkpoint
