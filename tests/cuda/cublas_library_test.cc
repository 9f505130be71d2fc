// cuBLAS loaded at run time (device/cuda/cublas_library.h): the library loads and its functions
// are callable on any machine with the toolkit, GPU or not; its errors say what was being done.
#include "device/cuda/cublas_library.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::cuda {
namespace {

using ::testing::HasSubstr;

TEST(CublasLibraryTest, LoadsAndMakesAHandleOrSaysWhyNot) {
  absl::StatusOr<std::unique_ptr<CublasLibrary>> library = CublasLibrary::Load();
  ASSERT_TRUE(library.ok()) << library.status();
  cublasHandle_t handle = nullptr;
  const absl::Status created = (*library)->Status((*library)->create(&handle), "a handle");
  if (created.ok()) {
    EXPECT_TRUE((*library)->Status((*library)->destroy(handle), "a handle").ok());
  } else {
    // No GPU (CI): cuBLAS's own error, not a crash.
    EXPECT_THAT(created.message(), HasSubstr("a handle: cuBLAS CUBLAS_STATUS_"));
  }
}

TEST(CublasLibraryTest, StatusesMapToCodesWithCublasWords) {
  absl::StatusOr<std::unique_ptr<CublasLibrary>> library = CublasLibrary::Load();
  ASSERT_TRUE(library.ok()) << library.status();
  const CublasLibrary& cublas = **library;
  EXPECT_TRUE(cublas.Status(CUBLAS_STATUS_SUCCESS, "a matmul").ok());
  const absl::Status memory = cublas.Status(CUBLAS_STATUS_ALLOC_FAILED, "a matmul");
  EXPECT_EQ(memory.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(memory.message(), HasSubstr("a matmul: cuBLAS CUBLAS_STATUS_ALLOC_FAILED ("));
  EXPECT_EQ(cublas.Status(CUBLAS_STATUS_NOT_SUPPORTED, "a matmul").code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(cublas.Status(CUBLAS_STATUS_EXECUTION_FAILED, "a matmul").code(),
            absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace loom::cuda
