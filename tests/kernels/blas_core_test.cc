// What loomd and loomctl say when OpenBLAS runs kernels older than the CPU.
#include "kernels/cpu/blas_core.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom {
namespace {

using ::testing::HasSubstr;

TEST(BlasCoreTest, GenericKernelsOnAModernCpuAreNamedWithTheCoreTypeToSet) {
  const std::string avx512 = BlasCoreWarning("Prescott", /*avx512=*/true, /*avx2=*/true);
  EXPECT_THAT(avx512, HasSubstr("'Prescott' kernels on a CPU with AVX-512"));
  EXPECT_THAT(avx512, HasSubstr("OPENBLAS_CORETYPE=SkylakeX"));
  EXPECT_THAT(BlasCoreWarning("Sandybridge", false, true), HasSubstr("OPENBLAS_CORETYPE=Haswell"));
}

TEST(BlasCoreTest, KernelsThatSuitTheCpuAreNotWarnedAbout) {
  EXPECT_EQ(BlasCoreWarning("SkylakeX", true, true), "");
  EXPECT_EQ(BlasCoreWarning("Haswell", false, true), "");
  EXPECT_EQ(BlasCoreWarning("Zen", false, true), "");
  EXPECT_EQ(BlasCoreWarning("Prescott", false, false), "");  // an old CPU: the right kernels
}

TEST(BlasCoreTest, ThisProcessesOpenBlasNamesItsKernels) { EXPECT_FALSE(BlasCoreName().empty()); }

}  // namespace
}  // namespace loom
