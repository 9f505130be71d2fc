// A node's parts of the checkpoints a job saves every few steps (daemon/checkpoint_snapshots.h):
// a part once every variable's snapshot of a step is in, reported; a part that cannot be written
// reported as an error and refusing what comes after; the parts removed with the collector.
#include "daemon/checkpoint_snapshots.h"

#include <filesystem>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "core/file_roots.h"
#include "core/safetensors.h"
#include "daemon/job_checkpoint.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/float_tensor.h"
#include "tests/test_directory.h"

namespace loom::daemon {
namespace {

using loom::testing::FloatTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Node 1's plan: two VARIABLE tasks and another task.
plan::Plan NodePlan() {
  plan::Plan plan;
  plan.set_node(1);
  for (const char* name : {"w@1", "b@1"}) {
    plan::Task* task = plan.add_tasks();
    task->set_name(name);
    task->set_kind(plan::VARIABLE);
  }
  plan.add_tasks()->set_name("matmul@1");
  return plan;
}

VariableSnapshot Snapshot(const std::string& task, int64_t step, float value) {
  VariableOnHost variable;
  variable.value = FloatTensor({value, value});
  variable.states.push_back(FloatTensor({-value, -value}));
  return VariableSnapshot{task, step, std::move(variable)};
}

class CheckpointSnapshotsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = loom::testing::FreshTestDirectory("checkpoint-snapshots");
    std::filesystem::create_directories(directory_);
    path_ = (directory_ / "model.safetensors").string();
    absl::StatusOr<FileRoots> roots =
        FileRoots::Beneath({directory_.string()}, "--checkpoint-root");
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *std::move(roots);
  }

  CheckpointSnapshots::WrittenCallback Recorder() {
    return [this](int64_t step, const absl::Status& status) {
      std::lock_guard<std::mutex> lock(mutex_);
      reports_.emplace_back(step, status);
    };
  }

  std::vector<std::pair<int64_t, absl::Status>> Reports() {
    std::lock_guard<std::mutex> lock(mutex_);
    return reports_;
  }

  std::filesystem::path directory_;
  std::string path_;
  FileRoots roots_ = FileRoots::Unrestricted();
  std::mutex mutex_;
  std::vector<std::pair<int64_t, absl::Status>> reports_;
};

TEST_F(CheckpointSnapshotsTest, WritesAStepsPartOnceEveryVariableIsInAndRemovesItAtTheEnd) {
  const std::string part = CheckpointPartPath(StepPartsPath(path_, 4), 1);
  {
    CheckpointSnapshots snapshots(NodePlan(), &roots_, path_, Recorder());
    ASSERT_TRUE(snapshots.Add(Snapshot("w@1", 4, 1.5)).ok());
    // Not complete: b@1's snapshot of step 4 is still to come.
    ASSERT_TRUE(snapshots.Finish().ok());
    EXPECT_TRUE(Reports().empty());
    ASSERT_TRUE(snapshots.Add(Snapshot("b@1", 4, 2.5)).ok());
    ASSERT_TRUE(snapshots.Finish().ok());
    std::vector<std::pair<int64_t, absl::Status>> reports = Reports();
    ASSERT_EQ(reports.size(), 1u);
    EXPECT_EQ(reports[0].first, 4);
    EXPECT_TRUE(reports[0].second.ok()) << reports[0].second;

    absl::StatusOr<checkpoint::Checkpoint> written = checkpoint::ReadSafetensors(part);
    ASSERT_TRUE(written.ok()) << written.status();
    EXPECT_THAT(written->tensors.at("value:w@1").Values<float>(), ElementsAre(1.5, 1.5));
    EXPECT_THAT(written->tensors.at("state0:w@1").Values<float>(), ElementsAre(-1.5, -1.5));
    EXPECT_THAT(written->tensors.at("value:b@1").Values<float>(), ElementsAre(2.5, 2.5));

    // Other tasks and repeated snapshots are the runtime's mistakes.
    EXPECT_EQ(snapshots.Add(Snapshot("matmul@1", 6, 0)).code(), absl::StatusCode::kInternal);
    ASSERT_TRUE(snapshots.Add(Snapshot("w@1", 6, 0)).ok());
    EXPECT_EQ(snapshots.Add(Snapshot("w@1", 6, 0)).code(), absl::StatusCode::kInternal);
  }
  EXPECT_FALSE(std::filesystem::exists(part));
}

TEST_F(CheckpointSnapshotsTest, APartThatCannotBeWrittenIsReportedAndRefusesTheNextSnapshots) {
  // A directory where step 2's part goes.
  std::filesystem::create_directories(CheckpointPartPath(StepPartsPath(path_, 2), 1));
  CheckpointSnapshots snapshots(NodePlan(), &roots_, path_, Recorder());
  ASSERT_TRUE(snapshots.Add(Snapshot("w@1", 2, 1)).ok());
  ASSERT_TRUE(snapshots.Add(Snapshot("b@1", 2, 1)).ok());
  absl::Status finished = snapshots.Finish();
  EXPECT_THAT(finished.message(), HasSubstr("the checkpoint after step 2: node 1 writing its "
                                            "checkpoint part"));
  std::vector<std::pair<int64_t, absl::Status>> reports = Reports();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].first, 2);
  EXPECT_EQ(reports[0].second, finished);
  EXPECT_EQ(snapshots.Add(Snapshot("w@1", 4, 1)), finished);
}

// Issue 56: a node writes its parts only beneath its --checkpoint-root directories.
TEST_F(CheckpointSnapshotsTest, APartOutsideTheRootsIsRefused) {
  absl::StatusOr<FileRoots> none = FileRoots::Beneath({}, "--checkpoint-root");
  ASSERT_TRUE(none.ok());
  CheckpointSnapshots snapshots(NodePlan(), &*none, path_, Recorder());
  ASSERT_TRUE(snapshots.Add(Snapshot("w@1", 2, 1)).ok());
  ASSERT_TRUE(snapshots.Add(Snapshot("b@1", 2, 1)).ok());
  absl::Status finished = snapshots.Finish();
  EXPECT_EQ(finished.code(), absl::StatusCode::kPermissionDenied) << finished;
  EXPECT_THAT(finished.message(), HasSubstr("--checkpoint-root"));
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(StepPartsPath(path_, 2), 1)));
}

}  // namespace
}  // namespace loom::daemon
