// "token_batch" with "first_step" (a resumed job) and its one-output form ("targets").
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/data/data_kernel_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

constexpr int64_t kGlobalBatch = 4;
constexpr int64_t kSequence = 5;
constexpr int64_t kMicroBatches = 2;
constexpr int64_t kRows = kGlobalBatch / kMicroBatches;

// Which outputs a call declares.
enum class Outputs { kBoth, kX, kY };

class TokenBatchFirstStepTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = absl::StrCat(::testing::TempDir(), "/loom_token_batch_first_step_", ::getpid(), "_",
                         info->name(), ".bin");
    // 89 tokens (a prime count, so that offsets wrap irregularly).
    std::ofstream stream(path_, std::ios::binary | std::ios::trunc);
    for (int k = 0; k < 89; ++k) stream.put(static_cast<char>((k * 53 + 7) % 256));
    ASSERT_TRUE(stream.good()) << path_;
  }
  void TearDown() override { std::remove(path_.c_str()); }

  std::unique_ptr<OpCall> Call(Outputs outputs, int64_t first_step) const {
    auto call = std::make_unique<OpCall>("token_batch");
    call->Attribute("path", StringAttribute(path_))
        .Attribute("global_batch", IntAttribute(kGlobalBatch))
        .Attribute("sequence", IntAttribute(kSequence))
        .Attribute("micro_batches", IntAttribute(kMicroBatches))
        .Output({kRows, kSequence}, plan::INT64);
    if (outputs == Outputs::kBoth) call->Output({kRows, kSequence}, plan::INT64);
    if (outputs == Outputs::kY) call->Attribute("targets", BoolAttribute(true));
    if (outputs == Outputs::kX && first_step % 2 == 1) {
      call->Attribute("targets", BoolAttribute(false));  // the default, stated
    }
    if (first_step != 0) call->Attribute("first_step", IntAttribute(first_step));
    return call;
  }

  // The outputs of piece `piece`.
  std::vector<std::vector<int64_t>> Run(Outputs outputs, int64_t first_step, int64_t piece) const {
    std::unique_ptr<OpCall> call = Call(outputs, first_step);
    absl::Status status = RunDataKernel(*call, piece);
    EXPECT_TRUE(status.ok()) << status;
    std::vector<std::vector<int64_t>> values;
    for (int index = 0; index < (outputs == Outputs::kBoth ? 2 : 1); ++index) {
      auto span = call->output(index).Values<int64_t>();
      values.emplace_back(span.begin(), span.end());
    }
    return values;
  }

  std::string path_;
};

TEST_F(TokenBatchFirstStepTest, PieceOfAResumedRunIsStepFirstStepPlusPieceOverMicroBatches) {
  for (int64_t first_step : {1, 3, 40}) {
    for (int64_t piece : {0, 1, 2, 5}) {
      EXPECT_EQ(Run(Outputs::kBoth, first_step, piece),
                Run(Outputs::kBoth, 0, first_step * kMicroBatches + piece))
          << "first_step " << first_step << ", piece " << piece;
    }
  }
}

TEST_F(TokenBatchFirstStepTest, OneOutputIsXOrWithTargetsY) {
  for (int64_t first_step : {0, 1, 7}) {
    for (int64_t piece : {0, 3}) {
      const std::vector<std::vector<int64_t>> both = Run(Outputs::kBoth, first_step, piece);
      EXPECT_EQ(Run(Outputs::kX, first_step, piece)[0], both[0]);
      EXPECT_EQ(Run(Outputs::kY, first_step, piece)[0], both[1]);
    }
  }
  // y is x shifted by one token.
  const std::vector<std::vector<int64_t>> both = Run(Outputs::kBoth, 0, 0);
  EXPECT_NE(both[0], both[1]);
}

TEST_F(TokenBatchFirstStepTest, HugeFirstStepDoesNotOverflow) {
  const int64_t huge = int64_t{1} << 62;
  std::vector<std::vector<int64_t>> values = Run(Outputs::kX, huge, 3);
  ASSERT_EQ(values[0].size(), static_cast<size_t>(kRows * kSequence));
}

TEST_F(TokenBatchFirstStepTest, BadAttributesAreRejected) {
  std::unique_ptr<OpCall> negative = Call(Outputs::kBoth, -2);
  absl::Status status = BuildDataKernel(*negative).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("token_batch: attribute 'first_step' must be >= 0, got -2"));

  std::unique_ptr<OpCall> targets_with_two = Call(Outputs::kBoth, 0);
  targets_with_two->Attribute("targets", BoolAttribute(true));
  status = BuildDataKernel(*targets_with_two).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("'targets'"));

  std::unique_ptr<OpCall> wrong_shape = std::make_unique<OpCall>("token_batch");
  wrong_shape->Attribute("path", StringAttribute(path_))
      .Attribute("global_batch", IntAttribute(kGlobalBatch))
      .Attribute("sequence", IntAttribute(kSequence))
      .Attribute("targets", BoolAttribute(true))
      .Output({kGlobalBatch, kSequence + 1}, plan::INT32);
  status = BuildDataKernel(*wrong_shape).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("output 'y'"));

  std::unique_ptr<OpCall> three = Call(Outputs::kBoth, 0);
  three->Output({kRows, kSequence}, plan::INT64);
  EXPECT_EQ(BuildDataKernel(*three).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace loom::kernel_test
