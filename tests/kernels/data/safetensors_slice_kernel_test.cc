#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "core/file_roots.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "tests/kernels/data/data_kernel_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

template <typename T>
HostTensor Tensor(plan::DataType data_type, const Shape& shape, const std::vector<T>& values) {
  HostTensor tensor;
  tensor.data_type = data_type;
  tensor.shape = shape;
  tensor.bytes.resize(values.size() * sizeof(T));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

std::vector<float> Iota(int64_t count) {
  std::vector<float> values;
  for (int64_t i = 0; i < count; ++i) values.push_back(static_cast<float>(i));
  return values;
}

class SafetensorsSliceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(::testing::TempDir(), "/loom_safetensors_slice_", ::getpid(), "_",
                         info->name(), ".safetensors");
    checkpoint::Checkpoint contents;
    contents.tensors["w"] = Tensor(plan::FLOAT32, {4, 3}, Iota(12));
    contents.tensors["cube"] = Tensor(plan::FLOAT32, {2, 3, 4}, Iota(24));
    contents.tensors["ids"] = Tensor<int64_t>(plan::INT64, {5}, {10, 11, 12, 13, 14});
    contents.tensors["scalar"] = Tensor(plan::FLOAT32, Shape(), std::vector<float>{2.5f});
    contents.tensors["empty"] = Tensor(plan::FLOAT32, {0, 3}, std::vector<float>{});
    ASSERT_TRUE(checkpoint::WriteSafetensors(path_, contents).ok());
  }
  void TearDown() override { std::remove(path_.c_str()); }

  // A "safetensors_slice" call reading `tensor` of logical_shape `logical` at `begin` into an
  // output of `output`.
  void Describe(OpCall& call, const std::string& tensor, const std::vector<int64_t>& logical,
                const std::vector<int64_t>& begin, const Shape& output,
                plan::DataType data_type = plan::FLOAT32) const {
    call.Attribute("path", StringAttribute(path_))
        .Attribute("tensor", StringAttribute(tensor))
        .Attribute("logical_shape", IntListAttribute(logical));
    if (!begin.empty()) call.Attribute("slice_begin", IntListAttribute(begin));
    call.Output(output, data_type);
  }

  absl::Status BuildError(const std::string& tensor, const std::vector<int64_t>& logical,
                          const std::vector<int64_t>& begin, const Shape& output,
                          plan::DataType data_type = plan::FLOAT32) const {
    OpCall call("safetensors_slice", "w_task");
    Describe(call, tensor, logical, begin, output, data_type);
    return BuildDataKernel(call).status();
  }

  std::string path_;
};

TEST_F(SafetensorsSliceTest, WholeTensor) {
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {}, {4, 3});
  ASSERT_TRUE(RunDataKernel(call).ok());
  EXPECT_THAT(call.OutputFloats(), ElementsAreArray(Iota(12)));
}

TEST_F(SafetensorsSliceTest, RowWindow) {
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {2, 0}, {2, 3});
  ASSERT_TRUE(RunDataKernel(call).ok());
  EXPECT_THAT(call.OutputFloats(), ElementsAre(6, 7, 8, 9, 10, 11));
}

TEST_F(SafetensorsSliceTest, ColumnWindow) {
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {1, 1}, {3, 2});
  ASSERT_TRUE(RunDataKernel(call).ok());
  EXPECT_THAT(call.OutputFloats(), ElementsAre(4, 5, 7, 8, 10, 11));
}

TEST_F(SafetensorsSliceTest, InteriorWindowOfARank3Tensor) {
  OpCall call("safetensors_slice");
  Describe(call, "cube", {2, 3, 4}, {1, 1, 1}, {1, 2, 2});
  ASSERT_TRUE(RunDataKernel(call).ok());
  // Element [1, j, k] is 12 + 4 j + k.
  EXPECT_THAT(call.OutputFloats(), ElementsAre(17, 18, 21, 22));
}

TEST_F(SafetensorsSliceTest, IntegerAndScalarAndEmptyTensors) {
  OpCall ids("safetensors_slice");
  Describe(ids, "ids", {5}, {3}, {2}, plan::INT64);
  ASSERT_TRUE(RunDataKernel(ids).ok());
  EXPECT_THAT(ids.output(0).Values<int64_t>(), ElementsAre(13, 14));

  OpCall scalar("safetensors_slice");
  Describe(scalar, "scalar", {}, {}, Shape());
  ASSERT_TRUE(RunDataKernel(scalar).ok());
  EXPECT_THAT(scalar.OutputFloats(), ElementsAre(2.5f));

  OpCall empty("safetensors_slice");
  Describe(empty, "empty", {0, 3}, {0, 1}, {0, 2});
  EXPECT_TRUE(RunDataKernel(empty).ok());
}

TEST_F(SafetensorsSliceTest, EveryPieceGetsTheWindowAndTheFileIsNotNeededAfterBuilding) {
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {0, 2}, {4, 1});
  absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(call);
  ASSERT_TRUE(kernel.ok()) << kernel.status();
  std::remove(path_.c_str());
  for (int64_t piece : {0, 1, 7}) {
    std::fill(call.output(0).bytes.begin(), call.output(0).bytes.end(), std::byte{0xFF});
    ASSERT_TRUE(call.Compute(**kernel, piece).ok());
    EXPECT_THAT(call.OutputFloats(), ElementsAre(2, 5, 8, 11));
  }
}

TEST_F(SafetensorsSliceTest, MissingTensorIsNamed) {
  absl::Status status = BuildError("w.exp_avg", {4, 3}, {}, {4, 3});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr("task 'w_task'"));
  EXPECT_THAT(status.message(),
              HasSubstr(absl::StrCat("checkpoint '", path_, "' has no tensor 'w.exp_avg'")));
}

TEST_F(SafetensorsSliceTest, DataTypeMustMatch) {
  absl::Status status = BuildError("ids", {5}, {}, {5}, plan::INT32);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'ids'"));
  EXPECT_THAT(status.message(), HasSubstr("int64"));
  EXPECT_THAT(status.message(), HasSubstr("int32"));
}

TEST_F(SafetensorsSliceTest, ShapeMustBeTheLogicalShape) {
  absl::Status status = BuildError("w", {3, 4}, {}, {3, 4});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w' has shape [4, 3]"));
  EXPECT_THAT(status.message(), HasSubstr("logical shape is [3, 4]"));
  EXPECT_THAT(status.message(), HasSubstr(path_));
}

TEST_F(SafetensorsSliceTest, WindowMustLieInside) {
  absl::Status status = BuildError("w", {4, 3}, {3, 0}, {2, 3});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("does not lie inside logical_shape [4, 3] (axis 0)"));
  EXPECT_EQ(BuildError("w", {4, 3}, {-1, 0}, {2, 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildError("w", {4, 3}, {0}, {2, 3}).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(BuildError("w", {4, 3, 1}, {}, {2, 3}).code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(SafetensorsSliceTest, MissingFileAndAttributesAreErrors) {
  OpCall call("safetensors_slice");
  call.Attribute("path", StringAttribute(path_ + ".missing"))
      .Attribute("tensor", StringAttribute("w"))
      .Attribute("logical_shape", IntListAttribute({4, 3}))
      .Output({4, 3});
  absl::Status status = BuildDataKernel(call).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(status.message(), HasSubstr(path_ + ".missing"));
  EXPECT_THAT(status.message(), HasSubstr("tensor 'w'"));

  OpCall no_tensor("safetensors_slice");
  no_tensor.Attribute("path", StringAttribute(path_))
      .Attribute("logical_shape", IntListAttribute({4, 3}))
      .Output({4, 3});
  status = BuildDataKernel(no_tensor).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'tensor'"));

  OpCall with_input("safetensors_slice");
  Describe(with_input, "w", {4, 3}, {}, {4, 3});
  with_input.Input(MakeTensor({4, 3}));
  EXPECT_EQ(BuildDataKernel(with_input).status().code(), absl::StatusCode::kInvalidArgument);
}

// Issue 56: an initial state is opened through KernelInit::files, only beneath its roots, and a
// file that is no safetensors file is refused without a byte of it in the error.
TEST_F(SafetensorsSliceTest, CheckpointOutsideTheRootsIsRefused) {
  const std::string root = path_ + ".root";
  std::filesystem::create_directory(root);
  absl::StatusOr<FileRoots> roots = FileRoots::Beneath({root}, "--checkpoint-root");
  ASSERT_TRUE(roots.ok()) << roots.status();
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {}, {4, 3});
  absl::Status status = BuildDataKernel(call, &*roots).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("--checkpoint-root"));

  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  EXPECT_EQ(registry.Create(plan::CPU, call.Init()).status().code(),
            absl::StatusCode::kPermissionDenied);  // no files at all
  std::filesystem::remove_all(root);
}

TEST_F(SafetensorsSliceTest, NoSafetensorsFileIsRefusedWithoutItsBytes) {
  // Its first 8 bytes, read as a little-endian header length, are 0x5345435245542121.
  {
    std::FILE* file = std::fopen(path_.c_str(), "wb");
    ASSERT_NE(file, nullptr);
    std::fputs("!!TERCES the secret text of some file", file);
    std::fclose(file);
  }
  OpCall call("safetensors_slice");
  Describe(call, "w", {4, 3}, {}, {4, 3});
  absl::Status status = BuildDataKernel(call).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << status;
  EXPECT_THAT(status.message(), HasSubstr("not a plausible safetensors header length"));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("secret")));
  EXPECT_THAT(status.message(), ::testing::Not(HasSubstr("TERCES")));
  // No number read from the file (the path, whose pid may be long, aside).
  const std::string message = absl::StrReplaceAll(status.message(), {{path_, "PATH"}});
  EXPECT_THAT(message, ::testing::Not(::testing::ContainsRegex("[0-9]{6,}")));
}

TEST(SafetensorsSliceRegistrationTest, IsAmongTheCpuKernels) {
  KernelRegistry registry;
  ASSERT_TRUE(RegisterCpuKernels(&registry).ok());
  EXPECT_TRUE(registry.Contains("safetensors_slice", plan::CPU));
}

}  // namespace
}  // namespace loom::kernel_test
