// Every boxing conversion, checked numerically against one device on 2, 3 and 4 devices, with
// uneven splits (7 rows, 6 columns).
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"
#include "tests/compiler/test_jobs.h"

namespace loom::compiler::testing {
namespace {

// x [7, 6] starts as `from` (a partial `from` comes out of a k-split matmul); an identity op is
// told to produce `to`, so its input is boxed from -> to; both are fetched.
std::string BoxingJob(const std::string& from, const std::string& to, int devices) {
  std::string job =
      absl::StrCat("name: \"boxing\" placement { ", CpuDevices(devices), " } num_steps: 2\n");
  if (from == "P") {
    absl::StrAppend(
        &job,
        "inputs { name: \"a\" shape: [7, 4] sbp: \"S(1)\" random_normal { std: 1 seed: 5 } }\n"
        "variables { name: \"w\" shape: [4, 6] sbp: \"S(0)\" initializer { normal { std: 1 seed: "
        "6 } } }\n"
        "ops { name: \"x\" type: \"matmul\" inputs: [\"a\", \"w\"] outputs: \"x\" output_sbp { "
        "sbp: \"P\" } }\n");
  } else {
    absl::StrAppend(&job, "inputs { name: \"x\" shape: [7, 6] sbp: \"", from,
                    "\" random_normal { std: 1 seed: 5 } }\n");
  }
  absl::StrAppend(&job, "ops { name: \"y\" type: \"identity\" inputs: \"x\" outputs: \"y\" ",
                  "output_sbp { sbp: \"", to, "\" } }\nfetch: \"y\"\n");
  return job;
}

struct Conversion {
  const char* from;
  const char* to;
};

class BoxingNumericTest : public ::testing::TestWithParam<std::tuple<Conversion, int>> {};

TEST_P(BoxingNumericTest, MatchesOneDevice) {
  const auto& [conversion, devices] = GetParam();
  const std::string what =
      absl::StrCat(conversion.from, " -> ", conversion.to, " on ", devices, " devices");
  job::Job many = ParseJob(BoxingJob(conversion.from, conversion.to, devices));
  // The conversion must actually be in the plan (not optimised away by inference).
  auto compiled = CompileOn(many, devices);
  ASSERT_TRUE(compiled.ok()) << what << ": " << compiled.status();
  EXPECT_EQ(SbpOf(*compiled, "x"), conversion.from) << what;
  EXPECT_EQ(SbpOf(*compiled, "y"), conversion.to) << what;
  auto expected = CompileAndRun(ParseJob(BoxingJob(conversion.from, conversion.to, 1)), 1);
  ASSERT_TRUE(expected.ok()) << what << " (1 device): " << expected.status();
  auto actual = CompileAndRun(many, devices);
  ASSERT_TRUE(actual.ok()) << what << ": " << actual.status();
  ExpectSameFetches(*expected, *actual, 1e-5, what);
}

constexpr Conversion kConversions[] = {
    {"S(0)", "B"},    {"S(1)", "B"}, {"P", "B"},    {"P", "S(0)"}, {"P", "S(1)"}, {"S(0)", "S(1)"},
    {"S(1)", "S(0)"}, {"B", "S(0)"}, {"B", "S(1)"}, {"B", "P"},    {"S(0)", "P"}, {"S(1)", "P"},
};

INSTANTIATE_TEST_SUITE_P(AllConversions, BoxingNumericTest,
                         ::testing::Combine(::testing::ValuesIn(kConversions),
                                            ::testing::Values(2, 3, 4)));

}  // namespace
}  // namespace loom::compiler::testing
