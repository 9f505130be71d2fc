// The summary printer `loomctl run-plan` and `loomctl run` share.
#include "tools/loomctl/job_summary.h"

#include <memory>

#include "absl/strings/str_split.h"
#include "actors/actor_factory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "testing/plan_builder.h"
#include "tests/core/json_test_util.h"

namespace loom::loomctl {
namespace {

using ::loom::testing::JsonValue;
using ::loom::testing::ParseJson;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(JobSummaryTest, Helpers) {
  EXPECT_EQ(TaskKindName(plan::COMPUTE), "compute");
  EXPECT_EQ(TaskKindName(plan::COLLECTIVE), "collective");
  EXPECT_EQ(FormatMilliseconds(1'250'000), "1.250");
  EXPECT_EQ(FileNamePart("a/b c:d_e-f.g"), "a_b_c_d_e-f.g");
}

TEST(JobSummaryTest, FormatTableAlignsColumns) {
  EXPECT_EQ(FormatTable({{"name", "n"}, {"a", "10"}, {"long name", "2"}}, 1),
            "name        n\n"
            "a          10\n"
            "long name   2\n");
  // No trailing spaces when the last text column is the widest.
  EXPECT_EQ(FormatTable({{"ab", "c"}, {"a", ""}}, 2), "ab  c\na\n");
}

class JobSummaryRunTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(RegisterCpuKernels(&kernels_).ok());
    // source (fill) -> sink on cpu:0, 3 pieces.
    PlanBuilder builder("summary_job");
    builder.AddCpuDevices(1);
    builder.AddRegister("x", {8});
    plan::Task& source = builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "fill");
    source.set_num_pieces(3);
    PlanBuilder::SetFloatAttribute(source, "value", 1.0);
    builder.AddTask("sink", plan::SINK, 0, {"x"}, {});
    plan_ = builder.plan();
    auto job = JobRuntime::Create(plan_, &kernels_, MakeActorFactory());
    ASSERT_TRUE(job.ok()) << job.status();
    job_ = std::move(*job);
    ASSERT_TRUE(job_->Run().ok());
  }

  KernelRegistry kernels_;
  plan::Plan plan_;
  std::unique_ptr<JobRuntime> job_;
};

TEST_F(JobSummaryRunTest, TextIsTheTableThenTheFooter) {
  std::string footer = FormatSummaryFooter(*job_);
  EXPECT_THAT(footer, HasSubstr("job 'summary_job': 2 actors on 1 stream threads, 6 acts\n"));
  EXPECT_THAT(footer, HasSubstr("makespan: "));
  EXPECT_THAT(footer, HasSubstr("peak memory:\n  node0/cpu:0"));
  EXPECT_THAT(footer, Not(HasSubstr("busy ms")));
  std::string table = FormatActorTable(*job_);
  EXPECT_THAT(table, HasSubstr("busy ms"));
  EXPECT_EQ(FormatSummaryText(*job_), table + "\n" + footer);
}

TEST_F(JobSummaryRunTest, JsonLayouts) {
  std::string multi_line = FormatSummaryJson(*job_, absl::OkStatus(), "t.json", {"a.npy"});
  std::string one_line =
      FormatSummaryJson(*job_, absl::InternalError("boom\nline two"), "", {}, JsonLayout::kOneLine);
  EXPECT_GT(std::vector<std::string>(absl::StrSplit(multi_line, '\n')).size(), 3u);
  EXPECT_EQ(one_line.find('\n'), one_line.size() - 1) << one_line;

  absl::StatusOr<JsonValue> json = ParseJson(multi_line);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << multi_line;
  EXPECT_EQ(json->Find("status")->string, "ok");
  EXPECT_EQ(json->Find("acts")->number, 6);
  EXPECT_EQ(json->Find("actors")->array.size(), 2u);
  EXPECT_EQ(json->Find("trace")->string, "t.json");
  EXPECT_EQ(json->Find("fetched_files")->array[0].string, "a.npy");

  json = ParseJson(one_line);
  ASSERT_TRUE(json.ok()) << json.status() << "\n" << one_line;
  EXPECT_EQ(json->Find("status")->string, "failed");
  EXPECT_THAT(json->Find("error")->string, HasSubstr("boom\nline two"));
  EXPECT_EQ(json->Find("trace")->type, JsonValue::Type::kNull);
  EXPECT_EQ(json->Find("devices")->array.size(), 1u);
}

}  // namespace
}  // namespace loom::loomctl
