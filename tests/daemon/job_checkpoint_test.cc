// Assembling a job's checkpoint from its nodes' parts (daemon/job_checkpoint.h), on hand-made
// parts: the logical tensors, and errors naming what is missing.
#include "daemon/job_checkpoint.h"

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
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
  }

  void WritePart(int node, std::map<std::string, HostTensor> tensors) {
    checkpoint::Checkpoint part;
    part.tensors = std::move(tensors);
    ASSERT_TRUE(checkpoint::WriteSafetensors(CheckpointPartPath(path_, node), part).ok());
  }

  std::filesystem::path directory_;
  std::string path_;
};

TEST_F(JobCheckpointTest, AssemblesTheLogicalTensorsFromTheNodesParts) {
  EXPECT_EQ(CheckpointPartPath("/a/m.safetensors", 3), "/a/m.safetensors.node-3");
  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}, {"state0:w@1", FloatTensor({30, 40})}});
  CheckpointProgress progress;
  progress.steps_taken = 7;
  progress.optimizer = true;
  ASSERT_TRUE(AssembleCheckpointParts(SplitVariable(), {0, 1}, path_, path_, progress).ok());

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
  absl::Status status = AssembleCheckpointParts(plan, {0, 1}, parts, path_, progress);
  ASSERT_TRUE(status.ok()) << status;
  absl::StatusOr<checkpoint::Checkpoint> assembled = checkpoint::ReadSafetensors(path_);
  ASSERT_TRUE(assembled.ok()) << assembled.status();
  EXPECT_THAT(assembled->tensors.at("b").Values<float>(), ElementsAre(5, 6));
  EXPECT_EQ(assembled->metadata.at("step"), "40");
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(parts, 1)));  // the parts are removed
}

TEST_F(JobCheckpointTest, AMissingPartOrPieceIsAnErrorNamingIt) {
  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  absl::Status status = AssembleCheckpointParts(SplitVariable(), {0, 1}, path_, path_, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("node 1's checkpoint part"));
  EXPECT_FALSE(std::filesystem::exists(CheckpointPartPath(path_, 0)));  // removed all the same
  EXPECT_FALSE(std::filesystem::exists(path_));

  WritePart(0, {{"value:w@0", FloatTensor({1, 2})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}});
  status = AssembleCheckpointParts(SplitVariable(), {0, 1}, path_, path_, {});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(),
              HasSubstr("variable 'w': no checkpoint part has optimizer.momentum_buffer.w of "
                        "task 'w@1'"));

  WritePart(0, {{"value:w@0", FloatTensor({1, 2, 3})}, {"state0:w@0", FloatTensor({10, 20})}});
  WritePart(1, {{"value:w@1", FloatTensor({3, 4})}, {"state0:w@1", FloatTensor({30, 40})}});
  status = AssembleCheckpointParts(SplitVariable(), {0, 1}, path_, path_, {});
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

  std::vector<std::string> removed = RemoveLeftoverCheckpointFiles(path_);
  EXPECT_THAT(removed, UnorderedElementsAreArray(leftovers));
  for (const std::string& file : leftovers) EXPECT_FALSE(std::filesystem::exists(file)) << file;
  for (const std::string& file : kept) EXPECT_TRUE(std::filesystem::exists(file)) << file;
  EXPECT_TRUE(std::filesystem::is_directory(absl::StrCat(path_, ".node-7")));

  EXPECT_TRUE(RemoveLeftoverCheckpointFiles(path_).empty());  // nothing left to remove
  EXPECT_TRUE(RemoveLeftoverCheckpointFiles((directory_ / "no-such-dir" / "m.safetensors").string())
                  .empty());
}

}  // namespace
}  // namespace loom::daemon
