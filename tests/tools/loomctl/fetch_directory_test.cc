// The fetch directory's files: a fetched tensor a daemon sent (JobEvent.fetched) written as .npy,
// and events whose bytes do not fit their shape refused.
#include "tools/loomctl/fetch_directory.h"

#include <cstddef>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/test_directory.h"
#include "tools/loomctl/npy_writer.h"

namespace loom::loomctl {
namespace {

using ::testing::HasSubstr;

// float32 [2, 3]: 1 .. 6.
HostTensor Matrix() {
  HostTensor tensor;
  tensor.data_type = plan::FLOAT32;
  tensor.shape = Shape({2, 3});
  for (float value = 1; value <= 6; ++value) {
    const auto* bytes = reinterpret_cast<const std::byte*>(&value);
    tensor.bytes.insert(tensor.bytes.end(), bytes, bytes + sizeof(float));
  }
  return tensor;
}

v1::FetchedTensor Fetched(const HostTensor& tensor, int64_t piece) {
  v1::FetchedTensor fetched;
  fetched.set_tensor("h.0/out");
  fetched.set_piece(piece);
  fetched.set_data_type(tensor.data_type);
  for (int64_t extent : tensor.shape.dimensions()) fetched.add_shape(extent);
  fetched.set_data(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
  return fetched;
}

TEST(WriteFetchedTensorTest, WritesThePieceAsLoomctlRunNamesIt) {
  const std::string directory = testing::FreshTestDirectory("fetched-tensor");
  ASSERT_TRUE(CreateFetchDirectory(directory).ok());
  const HostTensor tensor = Matrix();
  absl::StatusOr<std::string> path = WriteFetchedTensor(directory, Fetched(tensor, 7));
  ASSERT_TRUE(path.ok()) << path.status();
  EXPECT_EQ(*path, FetchedTensorPath(directory, "h.0/out", 7));
  std::ifstream file(*path, std::ios::binary);
  const std::string written((std::istreambuf_iterator<char>(file)), {});
  absl::StatusOr<std::string> expected = EncodeNpy(tensor);
  ASSERT_TRUE(expected.ok()) << expected.status();
  EXPECT_EQ(written, *expected);
}

TEST(WriteFetchedTensorTest, BytesThatDoNotFitTheShapeAreDataLossNamingTheTensor) {
  const std::string directory = testing::FreshTestDirectory("fetched-tensor");
  ASSERT_TRUE(CreateFetchDirectory(directory).ok());
  v1::FetchedTensor fetched = Fetched(Matrix(), 0);
  fetched.set_data(fetched.data().substr(4));
  absl::StatusOr<std::string> path = WriteFetchedTensor(directory, fetched);
  EXPECT_EQ(path.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(path.status().message(), HasSubstr("fetched tensor 'h.0/out'"));
  EXPECT_THAT(path.status().message(), HasSubstr("20 bytes"));

  fetched = Fetched(Matrix(), 0);
  fetched.set_shape(0, -2);
  EXPECT_EQ(WriteFetchedTensor(directory, fetched).status().code(), absl::StatusCode::kDataLoss);
  fetched = Fetched(Matrix(), -1);
  EXPECT_EQ(WriteFetchedTensor(directory, fetched).status().code(), absl::StatusCode::kDataLoss);
  EXPECT_TRUE(std::filesystem::is_empty(directory));
}

}  // namespace
}  // namespace loom::loomctl
