#include "cli/step_range.h"

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::loomctl {
namespace {

using ::testing::HasSubstr;

TEST(StepRangeTest, OneStepOrAnInclusiveRange) {
  absl::StatusOr<v1::StepRange> one = cli::ParseStepRange("7");
  ASSERT_TRUE(one.ok()) << one.status();
  EXPECT_EQ(one->first(), 7);
  EXPECT_EQ(one->last(), 7);
  absl::StatusOr<v1::StepRange> range = cli::ParseStepRange("100-101");
  ASSERT_TRUE(range.ok()) << range.status();
  EXPECT_EQ(range->first(), 100);
  EXPECT_EQ(range->last(), 101);
}

TEST(StepRangeTest, AnythingElseIsRefusedNamingTheText) {
  for (const char* text : {"", "x", "3-", "-3", "0", "0-2", "5-4", "1-2-3", "2:4", "1.5"}) {
    absl::StatusOr<v1::StepRange> parsed = cli::ParseStepRange(text);
    EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << text;
    EXPECT_THAT(parsed.status().message(), HasSubstr(absl::StrCat("'", text, "'"))) << text;
  }
}

}  // namespace
}  // namespace loom::loomctl
