// FetchWriter: a training run's fetched tensors written as their pieces assemble.
#include "tools/loomctl/fetch_writer.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/float_tensor.h"
#include "tests/test_directory.h"
#include "tools/loomctl/npy_writer.h"

namespace loom::loomctl {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A plan fetching `tensors`, each float32 [1] over two ranks as partial sums, from sinks
// "<tensor>@0" and "@1".
plan::Plan PlanFetching(const std::vector<std::string>& tensors) {
  plan::Plan plan;
  for (const std::string& tensor : tensors) {
    plan::Fetch* fetch = plan.add_fetches();
    fetch->set_tensor(tensor);
    fetch->mutable_logical()->add_shape(1);
    fetch->mutable_logical()->set_data_type(plan::FLOAT32);
    fetch->add_hierarchy(2);
    fetch->add_sbp("P");
    fetch->add_sinks(tensor + "@0");
    fetch->add_sinks(tensor + "@1");
  }
  return plan;
}

absl::Status Add(FetchWriter& writer, const std::string& sink, int64_t piece, float value) {
  const HostTensor kept = testing::FloatTensor({value});
  return writer.OnPiece(SinkPiece{sink, 0, piece, kept});
}

TEST(FetchWriterTest, WritesEachPieceOnceEveryRankHoldsItNumberedOnAcrossSegments) {
  const std::string directory = testing::FreshTestDirectory("fetch-writer");
  absl::StatusOr<std::unique_ptr<FetchWriter>> writer = FetchWriter::Create(directory);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a"})).ok());
  EXPECT_THAT((*writer)->sinks(), ElementsAre("a@0", "a@1"));
  ASSERT_TRUE(Add(**writer, "a@0", 0, 1).ok());
  EXPECT_THAT((*writer)->paths(), IsEmpty());        // rank 1's part is missing
  ASSERT_TRUE(Add(**writer, "other@0", 0, 5).ok());  // not a fetch's sink: ignored
  ASSERT_TRUE(Add(**writer, "a@1", 0, 2).ok());
  ASSERT_TRUE((*writer)->EndSegment().ok());

  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a"})).ok());
  ASSERT_TRUE(Add(**writer, "a@1", 0, 4).ok());
  ASSERT_TRUE(Add(**writer, "a@0", 0, 3).ok());
  ASSERT_TRUE((*writer)->EndSegment().ok());

  const std::string first = absl::StrCat(directory, "/a_step0.npy");
  const std::string second = absl::StrCat(directory, "/a_step1.npy");
  EXPECT_THAT((*writer)->paths(), ElementsAre(first, second));
  for (const auto& [path, sum] : {std::pair(first, 3.0f), std::pair(second, 7.0f)}) {
    std::ifstream file(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    absl::StatusOr<std::string> expected = EncodeNpy(testing::FloatTensor({sum}));
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(bytes, *expected) << path;
  }
}

TEST(FetchWriterTest, ListsTheFilesByStepThenFetchWhateverOrderTheyCameIn) {
  const std::string directory = testing::FreshTestDirectory("fetch-writer");
  absl::StatusOr<std::unique_ptr<FetchWriter>> writer = FetchWriter::Create(directory);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a", "b"})).ok());
  for (const auto& [sink, piece] : std::vector<std::pair<std::string, int64_t>>{{"b@0", 1},
                                                                                {"b@1", 1},
                                                                                {"a@0", 1},
                                                                                {"a@1", 1},
                                                                                {"b@0", 0},
                                                                                {"b@1", 0},
                                                                                {"a@1", 0},
                                                                                {"a@0", 0}}) {
    ASSERT_TRUE(Add(**writer, sink, piece, 1).ok()) << sink << " " << piece;
  }
  ASSERT_TRUE((*writer)->EndSegment().ok());
  EXPECT_THAT((*writer)->paths(), ElementsAre(absl::StrCat(directory, "/a_step0.npy"),
                                              absl::StrCat(directory, "/b_step0.npy"),
                                              absl::StrCat(directory, "/a_step1.npy"),
                                              absl::StrCat(directory, "/b_step1.npy")));
}

TEST(FetchWriterTest, APieceWaitsForRoomWhenTheQueueIsFull) {
  const std::string directory = testing::FreshTestDirectory("fetch-writer");
  // Room for one piece of 4 bytes at a time: every piece waits for the one before it.
  absl::StatusOr<std::unique_ptr<FetchWriter>> writer =
      FetchWriter::Create(directory, /*max_queued_bytes=*/4);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a"})).ok());
  for (int piece = 0; piece < 50; ++piece) {
    ASSERT_TRUE(Add(**writer, "a@0", piece, piece).ok());
    ASSERT_TRUE(Add(**writer, "a@1", piece, 1).ok());
  }
  ASSERT_TRUE((*writer)->EndSegment().ok());
  const std::vector<std::string> paths = (*writer)->paths();
  ASSERT_EQ(paths.size(), 50u);
  for (int piece = 0; piece < 50; ++piece) {
    EXPECT_EQ(paths[piece], absl::StrCat(directory, "/a_step", piece, ".npy"));
    std::ifstream file(paths[piece], std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
    absl::StatusOr<std::string> expected = EncodeNpy(testing::FloatTensor({piece + 1.0f}));
    ASSERT_TRUE(expected.ok());
    EXPECT_EQ(bytes, *expected) << paths[piece];
  }
}

TEST(FetchWriterTest, ErrorsNameTheCulprit) {
  const std::string directory = testing::FreshTestDirectory("fetch-writer");
  absl::StatusOr<std::unique_ptr<FetchWriter>> writer = FetchWriter::Create(directory);
  ASSERT_TRUE(writer.ok()) << writer.status();
  // Two tensors on the same files.
  absl::Status clash = (*writer)->BeginSegment(PlanFetching({"a/b", "a_b"}));
  EXPECT_EQ(clash.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(clash.message(), HasSubstr("'a/b' and 'a_b'"));

  // A piece that never reached every rank.
  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a"})).ok());
  ASSERT_TRUE(Add(**writer, "a@0", 0, 1).ok());
  absl::Status ended = (*writer)->EndSegment();
  EXPECT_EQ(ended.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(ended.message(), HasSubstr("fetch 'a': 1 pieces never reached every rank's sink"));

  // A file that cannot be written: the directory is gone. The write happens on the writer's
  // thread: the segment's end reports it, and so does every later piece.
  ASSERT_TRUE((*writer)->BeginSegment(PlanFetching({"a"})).ok());
  std::filesystem::remove_all(directory);
  ASSERT_TRUE(Add(**writer, "a@0", 0, 1).ok());
  ASSERT_TRUE(Add(**writer, "a@1", 0, 1).ok());
  absl::Status written = (*writer)->EndSegment();
  EXPECT_FALSE(written.ok());
  EXPECT_THAT(written.message(), HasSubstr(directory + "/a_step"));
  EXPECT_EQ(Add(**writer, "a@0", 1, 1), written);

  // A directory that cannot be made.
  EXPECT_FALSE(FetchWriter::Create("/proc/loom-fetches").ok());
}

}  // namespace
}  // namespace loom::loomctl
