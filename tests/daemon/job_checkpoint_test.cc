// Assembling a job's checkpoint from its nodes' parts (daemon/job_checkpoint.h), on hand-made
// parts: the logical tensors, and errors naming what is missing.
#include "daemon/job_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/file_roots.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/float_tensor.h"
#include "tests/test_directory.h"

namespace loom::daemon {
namespace {

using loom::testing::FloatTensor;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::UnorderedElementsAreArray;

// Variable "w" [4] split over two ranks (tasks w@0, w@1), with one optimizer state.
plan::Plan SplitVariable() {
  plan::Plan plan;
  plan.set_job_name("split");
  plan::VariableLayout* layout = plan.add_variables();
  layout->set_name("w");
  layout->mutable_logical()->add_shape(4);
  layout->mutable_logical()->set_data_type(plan::FLOAT32);
  layout->add_hierarchy(2);
  layout->add_sbp("S(0)");
  layout->add_tasks("w@0");
  layout->add_tasks("w@1");
  layout->add_state_names("optimizer.momentum_buffer.w");
  return plan;
}

class JobCheckpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    directory_ = loom::testing::FreshTestDirectory("job-checkpoint");
    std::filesystem::create_directories(directory_);
    path_ = (directory_ / "model.safetensors").string();
    absl::StatusOr<FileRoots> roots =
        FileRoots::Beneath({directory_.string()}, "--checkpoint-root");
    ASSERT_TRUE(roots.ok()) << roots.status();
    roots_ = *std::move(roots);
  }

  void WritePart(int node, std::map<std::string, HostTensor> tensors) {
    checkpoint::Checkpoint part;
    part.tensors = std::move(tensors);
    ASSERT_TRUE(checkpoint::WriteSafetensors(CheckpointPartPath(path_, node), part).ok());
  }

  std::filesystem::path directory_;
  std::string path_;
  FileRoots roots_ = FileRoots::Unrestricted();
};

TEST_F(JobCheckpointTest, AssemblesTheLogicalTensorsFromTheNodesParts) {
  EXPECT_EQ(CheckpointPartPath("/a/m.safetensors", 3), "/a/m.safetensors.node-3");
  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}, {"state0:w@1", FloatTensor({30, 40})}});
  CheckpointProgress progress;
  progress.steps_taken = 7;
  progress.optimizer = true;
  ASSERT_TRUE(
      AssembleCheckpointParts(roots_, SplitVariable(), {0, 1}, path_, path_, progress, false).ok());

  absl::StatusOr<checkpoint::Checkpoint> assembled = checkpoint::ReadSafetensors(path_);
  ASSERT_TRUE(assembled.ok()) << assembled.status();
  EXPECT_THAT(assembled->tensors.at("w").Values<float>(), ElementsAre(1, 2, 3, 4));
  EXPECT_THAT(assembled->tensors.at("optimizer.momentum_buffer.w").Values<float>(),
              ElementsAre(10, 20, 30, 40));
  EXPECT_THAT(assembled->tensors.at("optimizer.step").Values<int64_t>(), ElementsAre(7));
  EXPECT_EQ(assembled->metadata.at("step"), "7");
  // Only the checkpoint is left.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(directory_),
                          std::filesystem::directory_iterator()),
            1);
}

TEST_F(JobCheckpointTest, APeriodicCheckpointsPartsLieUnderItsStepAndReplicasAreNotRead) {
  EXPECT_EQ(StepPartsPath("/a/m.safetensors", 40), "/a/m.safetensors.step-40");
  // "b" [2] broadcast over two ranks: the checkpoint takes rank 0's copy, rank 1's is not read
  // (its part lacks it here).
  plan::Plan plan;
  plan::VariableLayout* layout = plan.add_variables();
  layout->set_name("b");
  layout->mutable_logical()->add_shape(2);
  layout->mutable_logical()->set_data_type(plan::FLOAT32);
  layout->add_hierarchy(2);
  layout->add_sbp("B");
  layout->add_tasks("b@0");
  layout->add_tasks("b@1");
  const std::string parts = StepPartsPath(path_, 40);
  for (int node : {0, 1}) {
    checkpoint::Checkpoint part;
    if (node == 0) part.tensors["value:b@0"] = FloatTensor({5, 6});
    ASSERT_TRUE(checkpoint::WriteSafetensors(CheckpointPartPath(parts, node), part).ok());
  }
  CheckpointProgress progress;
  progress.steps_taken = 40;
  absl::Status status =
      AssembleCheckpointParts(roots_, plan, {0, 1}, parts, path_, progress, false);
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<checkpoint::Checkpoint> assembled = checkpoint::ReadSafetensors(path_);
  ASSERT_TRUE(assembled.ok()) << assembled.status();
  EXPECT_THAT(assembled->tensors.at("b").Values<float>(), ElementsAre(5, 6));
  EXPECT_EQ(assembled->metadata.at("step"), "40");
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(parts, 1)));  // the parts are removed
}

TEST_F(JobCheckpointTest, AMissingPartOrPieceIsAnErrorNamingIt) {
  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  absl::Status status =
      AssembleCheckpointParts(roots_, SplitVariable(), {0, 1}, path_, path_, {}, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("node 1's checkpoint part"));
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(path_, 0)));  // removed all the same
  EXPECT_FALSE(std::filesystem::exists(path_));

  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}});
  status = AssembleCheckpointParts(roots_, SplitVariable(), {0, 1}, path_, path_, {}, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("variable 'w': no checkpoint part has optimizer.momentum_buffer.w of "
                        "task 'w@1'"));

  WritePart(0, {{"value:w@0", FloatTensor({1, 2, 3})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}, {"state0:w@1", FloatTensor({30, 40})}});
  status = AssembleCheckpointParts(roots_, SplitVariable(), {0, 1}, path_, path_, {}, false);
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("variable 'w'"));
}

TEST_F(JobCheckpointTest, OnlyTheFilesAnInterruptedSaveLeavesAreRemoved) {
  const std::vector<std::string> leftovers = {
      CheckpointPartPath(path_, 0),
      CheckpointPartPath(path_, 12),
      CheckpointPartPath(StepPartsPath(path_, 50), 1),
      absl::StrCat(CheckpointPartPath(StepPartsPath(path_, 100), 3), ".tmp.4242.0"),
      absl::StrCat(path_, ".tmp.4242.7"),
  };
  const std::vector<std::string> kept = {
      path_,  // the last checkpoint saved
      absl::StrCat(path_, ".node-"),
      absl::StrCat(path_, ".node-1.bak"),
      absl::StrCat(path_, ".step-5"),
      absl::StrCat(path_, ".tmp.4242"),
      (directory_ / "other.safetensors.node-0").string(),
      (directory_ / "model.safetensors2.node-0").string(),
  };
  for (const std::vector<std::string>* files : {&leftovers, &kept}) {
    for (const std::string& file : *files) std::ofstream(file) << "x";
  }
  std::filesystem::create_directory(absl::StrCat(path_, ".node-7"));  // not a file: kept

  std::vector<std::string> removed = RemoveLeftoverCheckpointFiles(&roots_, path_);
  EXPECT_THAT(removed, UnorderedElementsAreArray(leftovers));
  for (const std::string& file : leftovers) EXPECT_FALSE(std::filesystem::exists(file)) << file;
  for (const std::string& file : kept) EXPECT_TRUE(std::filesystem::exists(file)) << file;
  EXPECT_TRUE(std::filesystem::is_directory(absl::StrCat(path_, ".node-7")));

  EXPECT_TRUE(RemoveLeftoverCheckpointFiles(&roots_, path_).empty());  // nothing left to remove
  EXPECT_TRUE(RemoveLeftoverCheckpointFiles(&roots_,
                                            (directory_ / "no-such-dir" / "m.safetensors").string())
                  .empty());
}

// Issue 56 finding 5: checkpoints are written only beneath --checkpoint-root, and never over a
// file the job did not write unless it says so.
TEST_F(JobCheckpointTest, CheckpointPathsOutsideTheRootsAreRefused) {
  const plan::Plan plan = SplitVariable();
  EXPECT_TRUE(CheckCheckpointPath(&roots_, path_, 0, false, plan).ok());

  absl::Status status = CheckCheckpointPath(nullptr, path_, 0, false, plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr("--checkpoint-root"));

  const std::filesystem::path outside = directory_.parent_path() / "job-checkpoint-outside";
  std::filesystem::create_directories(outside);
  const std::string dot_dot =
      (directory_ / ".." / "job-checkpoint-outside" / "m.safetensors").string();
  for (const std::string& path :
       {(outside / "m.safetensors").string(), dot_dot, std::string("/var/tmp/m.safetensors")}) {
    status = CheckCheckpointPath(&roots_, path, 0, false, plan);
    EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << path << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(path));
    EXPECT_THAT(status.message(), HasSubstr(directory_.lexically_normal().string()));
  }
  // A directory inside that is a symlink out.
  std::filesystem::create_directory_symlink(outside, directory_ / "escape");
  status = CheckCheckpointPath(&roots_, (directory_ / "escape" / "m.safetensors").string(), 0,
                               false, plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  std::filesystem::remove_all(outside);
}

TEST_F(JobCheckpointTest, AnExistingFileIsKeptUnlessOverwriteIsAsked) {
  const plan::Plan plan = SplitVariable();
  std::ofstream(path_) << "someone else's file";
  absl::Status status = CheckCheckpointPath(&roots_, path_, 0, false, plan);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(status.message(), HasSubstr(path_));
  EXPECT_THAT(status.message(), HasSubstr("overwrite_checkpoint"));
  EXPECT_TRUE(CheckCheckpointPath(&roots_, path_, 0, true, plan).ok());

  // At the save (a file that appeared while the job ran): kept, the save fails naming it.
  auto write_parts = [&] {
    WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
    WritePart(1, {{"value:w@1", FloatTensor({3, 4})}, {"state0:w@1", FloatTensor({30, 40})}});
  };
  CheckpointProgress progress;
  progress.metadata[kWriterKey] = CheckpointWriter("job-1", "2024-01-01T00:00:00Z");
  write_parts();
  status = AssembleCheckpointParts(roots_, plan, {0, 1}, path_, path_, progress, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  EXPECT_THAT(status.message(), HasSubstr(path_));
  std::string contents;
  std::getline(std::ifstream(path_), contents);
  EXPECT_EQ(contents, "someone else's file");
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(path_, 0)));  // parts removed

  // With overwrite it is replaced; a later save of the same job replaces its own file, another
  // job's save does not.
  write_parts();
  ASSERT_TRUE(AssembleCheckpointParts(roots_, plan, {0, 1}, path_, path_, progress, true).ok());
  write_parts();
  status = AssembleCheckpointParts(roots_, plan, {0, 1}, path_, path_, progress, false);
  EXPECT_TRUE(status.ok()) << status;
  CheckpointProgress other;
  other.metadata[kWriterKey] = CheckpointWriter("job-1", "2025-01-01T00:00:00Z");
  write_parts();
  status = AssembleCheckpointParts(roots_, plan, {0, 1}, path_, path_, other, false);
  EXPECT_EQ(status.code(), absl::StatusCode::kAlreadyExists) << status;
  absl::StatusOr<checkpoint::Checkpoint> kept = checkpoint::ReadSafetensors(path_);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->metadata.at(kWriterKey), progress.metadata.at(kWriterKey));
}

TEST_F(JobCheckpointTest, PartsAreWrittenOnlyUnderAPartNameBeneathTheRoots) {
  std::map<std::string, VariableOnHost> variables;
  variables["w@0"].value = FloatTensor({1, 2});
  EXPECT_TRUE(WriteCheckpointPart(0, variables, roots_, CheckpointPartPath(path_, 0)).ok());
  EXPECT_TRUE(
      WriteCheckpointPart(0, variables, roots_, CheckpointPartPath(StepPartsPath(path_, 3), 0))
          .ok());
  for (const std::string& bad : {(directory_ / "notes.txt").string(), path_,
                                 (directory_ / "m.safetensors.node-x").string()}) {
    absl::Status status = WriteCheckpointPart(0, variables, roots_, bad);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << bad << ": " << status;
    EXPECT_THAT(status.message(), HasSubstr(bad));
    EXPECT_FALSE(std::filesystem::exists(bad)) << bad;
  }
  const std::string outside = "/var/tmp/m.safetensors.node-0";
  absl::Status status = WriteCheckpointPart(0, variables, roots_, outside);
  EXPECT_EQ(status.code(), absl::StatusCode::kPermissionDenied) << status;
  EXPECT_THAT(status.message(), HasSubstr("node 0"));
}

}  // namespace
}  // namespace loom::daemon
