// The "token_dataset" kernel (docs/DATA.md): files, directories and patterns, documents, the
// per-epoch shuffles, blends, the batch window (ranks, micro-batches, resumed steps) and the
// errors. tests/data/test_token_dataset_batches.py checks its batches against the reference script.

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "core/file_roots.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/kernels/data/data_kernel_test_util.h"
#include "tests/kernels/kernel_test_util.h"

namespace loom::kernel_test {
namespace {

using ::testing::HasSubstr;

// A token that no test file holds except as the end of a document.
constexpr int64_t kEndOfText = 1000000;

class TokenDatasetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
    directory_ =
        absl::StrCat(::testing::TempDir(), "/loom_token_dataset_", ::getpid(), "_", info->name());
    std::filesystem::remove_all(directory_);
    std::filesystem::create_directories(directory_);
  }
  void TearDown() override { std::filesystem::remove_all(directory_); }

  // Writes `tokens` as uint32 (or bytes / uint16 per `format`) to directory_/name; its path.
  std::string Write(const std::string& name, const std::vector<int64_t>& tokens,
                    const std::string& format = "uint32") {
    const std::string path = absl::StrCat(directory_, "/", name);
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream stream(path, std::ios::binary | std::ios::trunc);
    const int width = format == "bytes" ? 1 : format == "uint16" ? 2 : 4;
    for (int64_t token : tokens) {
      for (int byte = 0; byte < width; ++byte) stream.put(static_cast<char>(token >> (8 * byte)));
    }
    return path;
  }

  std::string directory_;
};

// Tokens first, first + 1, ..., first + count - 1.
std::vector<int64_t> Counting(int64_t first, int64_t count) {
  std::vector<int64_t> tokens(count);
  for (int64_t k = 0; k < count; ++k) tokens[k] = first + k;
  return tokens;
}

struct DatasetConfig {
  // Paths of each source.
  std::vector<std::vector<std::string>> sources = {};
  std::vector<std::string> formats = {};  // default uint32 for every source
  std::vector<double> weights = {};       // default: none given
  std::optional<int64_t> end_of_text = std::nullopt;
  bool in_order = false;
  int64_t seed = 0;
  int64_t global_batch = 4;
  int64_t sequence = 5;
  int64_t sample_begin = 0;
  int64_t sample_count = -1;  // -1: global_batch
  int64_t micro_batches = 1;
  int64_t first_step = 0;
  plan::DataType data_type = plan::INT64;
};

std::unique_ptr<OpCall> MakeCall(const DatasetConfig& config) {
  auto call = std::make_unique<OpCall>("token_dataset");
  plan::AttributeValue paths;
  plan::AttributeValue counts;
  plan::AttributeValue formats;
  for (size_t source = 0; source < config.sources.size(); ++source) {
    for (const std::string& path : config.sources[source]) {
      paths.mutable_string_list()->add_values(path);
    }
    counts.mutable_int_list()->add_values(static_cast<int64_t>(config.sources[source].size()));
    formats.mutable_string_list()->add_values(config.formats.empty() ? "uint32"
                                                                     : config.formats[source]);
  }
  const int64_t count = config.sample_count < 0 ? config.global_batch : config.sample_count;
  const int64_t rows = count / config.micro_batches;
  call->Attribute("paths", paths)
      .Attribute("path_counts", counts)
      .Attribute("formats", formats)
      .Attribute("in_order", BoolAttribute(config.in_order))
      .Attribute("seed", IntAttribute(config.seed))
      .Attribute("global_batch", IntAttribute(config.global_batch))
      .Attribute("sequence", IntAttribute(config.sequence))
      .Attribute("sample_begin", IntAttribute(config.sample_begin))
      .Attribute("sample_count", IntAttribute(count))
      .Attribute("micro_batches", IntAttribute(config.micro_batches))
      .Output({rows, config.sequence}, config.data_type)
      .Output({rows, config.sequence}, config.data_type);
  if (!config.weights.empty()) {
    plan::AttributeValue weights;
    for (double weight : config.weights) weights.mutable_float_list()->add_values(weight);
    call->Attribute("weights", weights);
  }
  if (config.end_of_text.has_value()) {
    call->Attribute("end_of_text", IntAttribute(*config.end_of_text));
  }
  if (config.first_step > 0) call->Attribute("first_step", IntAttribute(config.first_step));
  return call;
}

// A built kernel and its call; Rows(piece) runs a piece and returns x's and y's rows.
class Reader {
 public:
  explicit Reader(const DatasetConfig& config, const FileRoots* files = nullptr)
      : config_(config), call_(MakeCall(config)) {
    absl::StatusOr<std::unique_ptr<Kernel>> kernel = BuildDataKernel(*call_, files);
    status_ = kernel.status();
    if (kernel.ok()) kernel_ = *std::move(kernel);
  }
  const absl::Status& status() const { return status_; }

  // Rows of x (or y) of `piece`, one vector of T tokens per row.
  std::vector<std::vector<int64_t>> Rows(int64_t piece, int output = 0) {
    EXPECT_TRUE(status_.ok()) << status_;
    absl::Status computed = call_->Compute(*kernel_, piece);
    EXPECT_TRUE(computed.ok()) << computed;
    const std::vector<int64_t> values = TokenValues(call_->output(output));
    std::vector<std::vector<int64_t>> rows;
    for (size_t at = 0; at < values.size(); at += config_.sequence) {
      rows.emplace_back(values.begin() + static_cast<std::ptrdiff_t>(at),
                        values.begin() + static_cast<std::ptrdiff_t>(at + config_.sequence));
    }
    return rows;
  }
  absl::Status ComputeStatus(int64_t piece) { return call_->Compute(*kernel_, piece); }

 private:
  DatasetConfig config_;
  std::unique_ptr<OpCall> call_;
  std::unique_ptr<Kernel> kernel_;
  absl::Status status_;
};

TEST_F(TokenDatasetTest, InOrderSampleKIsTokensKTToKTPlusT) {
  // N = 43 tokens, T = 5: S = 8 samples per epoch; sample k is tokens [5k, 5k + 6).
  const std::string path = Write("a.bin", Counting(100, 43));
  DatasetConfig config{.sources = {{path}}, .in_order = true, .global_batch = 3};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  for (int64_t step = 0; step < 6; ++step) {
    const auto x = reader.Rows(step, 0);
    const auto y = reader.Rows(step, 1);
    for (int64_t row = 0; row < 3; ++row) {
      const int64_t k = (step * 3 + row) % 8;
      EXPECT_EQ(x[row], Counting(100 + 5 * k, 5)) << "step " << step << " row " << row;
      EXPECT_EQ(y[row], Counting(101 + 5 * k, 5)) << "step " << step << " row " << row;
    }
  }
}

TEST_F(TokenDatasetTest, ShuffledEpochVisitsEverySampleOnceAndEpochsDiffer) {
  // One document: every sample of an epoch is a distinct window [5s, 5s + 6) of the file.
  const std::string path = Write("a.bin", Counting(0, 161));  // S = 32
  DatasetConfig config{.sources = {{path}}, .seed = 7, .global_batch = 8};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  std::vector<int64_t> first_epoch;
  std::vector<int64_t> second_epoch;
  for (int64_t step = 0; step < 8; ++step) {
    for (const auto& row : reader.Rows(step)) {
      ASSERT_EQ(row[0] % 5, 0);
      EXPECT_EQ(row, Counting(row[0], 5));
      (step < 4 ? first_epoch : second_epoch).push_back(row[0] / 5);
    }
  }
  for (std::vector<int64_t>* epoch : {&first_epoch, &second_epoch}) {
    std::vector<int64_t> sorted = *epoch;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, Counting(0, 32));
  }
  EXPECT_NE(first_epoch, second_epoch);
  EXPECT_NE(first_epoch, Counting(0, 32));

  DatasetConfig other_seed = config;
  other_seed.seed = 8;
  Reader other(other_seed);
  EXPECT_NE(other.Rows(0), reader.Rows(0));
}

TEST_F(TokenDatasetTest, DocumentsStayWholeAndEachEpochReadsTokensOnce) {
  // Documents of distinct lengths with ids counting up inside each, ended by kEndOfText, in two
  // files (the second not ending with it: a file's end ends a document too).
  std::vector<int64_t> first;
  std::vector<int64_t> second;
  std::set<int64_t> document_starts;
  int64_t next = 0;
  for (int document = 0; document < 12; ++document) {
    std::vector<int64_t>& file = document < 7 ? first : second;
    const int64_t length = 3 + (document * 5) % 11;
    document_starts.insert(next);
    for (int64_t k = 0; k < length; ++k) file.push_back(next++);
    if (document != 11) file.push_back(kEndOfText);
  }
  Write("docs/part-0.u32", first);
  Write("docs/part-1.u32", second);
  DatasetConfig config{.sources = {{directory_ + "/docs"}},
                       .end_of_text = kEndOfText,
                       .seed = -3,
                       .global_batch = 1,
                       .sequence = 4};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  // One epoch: S = (N - 1) / T samples, one per step.
  const int64_t samples = static_cast<int64_t>(first.size() + second.size() - 1) / 4;
  std::multiset<int64_t> seen;
  for (int64_t step = 0; step < samples; ++step) {
    std::vector<int64_t> sample = reader.Rows(step, 0)[0];
    sample.push_back(reader.Rows(step, 1)[0].back());
    for (size_t k = 0; k + 1 < sample.size(); ++k) {
      if (sample[k + 1] == kEndOfText || sample[k + 1] == sample[k] + 1) continue;
      // Only an end-of-text token or the end of the last file (a document without one) is
      // followed by another document's start.
      EXPECT_TRUE(sample[k] == kEndOfText || sample[k] == next - 1) << sample[k];
      EXPECT_TRUE(document_starts.contains(sample[k + 1])) << sample[k + 1];
    }
    for (size_t k = 0; k + 1 < sample.size(); ++k) {
      if (sample[k] != kEndOfText) seen.insert(sample[k]);
    }
  }
  // Within one epoch no token is read twice as x.
  for (int64_t token : seen) EXPECT_EQ(seen.count(token), 1u) << token;
}

TEST_F(TokenDatasetTest, BlendThreeToOneWithinTwoPercentOverAThousandSteps) {
  const std::string small = Write("small.bin", Counting(0, 100), "bytes");
  const std::string large = Write("large.u32", Counting(5000, 300));
  for (int64_t batch : {1, 8}) {
    DatasetConfig config{.sources = {{small}, {large}},
                         .formats = {"bytes", "uint32"},
                         .weights = {3, 1},
                         .global_batch = batch,
                         .sequence = 4};
    Reader reader(config);
    ASSERT_TRUE(reader.status().ok()) << reader.status();
    int64_t from_small = 0;
    int64_t total = 0;
    for (int64_t step = 0; step < 1000; ++step) {
      for (const auto& row : reader.Rows(step)) {
        const bool is_small = row[0] < 100;
        for (int64_t token : row) EXPECT_EQ(token < 100, is_small);
        from_small += is_small ? 1 : 0;
        ++total;
      }
    }
    const double share = static_cast<double>(from_small) / static_cast<double>(total);
    EXPECT_NEAR(share, 0.75, 0.02) << "batch " << batch;
  }
}

TEST_F(TokenDatasetTest, RanksMicroBatchesAndResumedStepsReadTheUnsplitBatch) {
  const std::string path = Write("a.bin", Counting(0, 997));
  DatasetConfig whole{.sources = {{path}}, .seed = 11, .global_batch = 8};
  Reader all(whole);
  ASSERT_TRUE(all.status().ok()) << all.status();
  for (int64_t step : {0, 3, 40}) {
    const auto expected = all.Rows(step);
    // Rank 1 of 2 with two micro-batches: pieces 2 * step and 2 * step + 1.
    DatasetConfig rank = whole;
    rank.sample_begin = 4;
    rank.sample_count = 4;
    rank.micro_batches = 2;
    Reader split(rank);
    for (int micro = 0; micro < 2; ++micro) {
      const auto rows = split.Rows(2 * step + micro);
      ASSERT_EQ(rows.size(), 2u);
      EXPECT_EQ(rows[0], expected[4 + 2 * micro]);
      EXPECT_EQ(rows[1], expected[5 + 2 * micro]);
    }
    // A run resumed at `step` reads it as its piece 0.
    DatasetConfig resumed = whole;
    resumed.first_step = step;
    Reader later(resumed);
    EXPECT_EQ(later.Rows(0), expected);
  }
}

TEST_F(TokenDatasetTest, HugeStepsReadAndTheLastNumberableStepIsRefused) {
  const std::string path = Write("a.bin", Counting(0, 50));
  DatasetConfig config{.sources = {{path}}, .first_step = int64_t{1} << 50};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  EXPECT_EQ(reader.Rows(0).size(), 4u);
  config.first_step = std::numeric_limits<int64_t>::max() / 4;
  Reader beyond(config);
  ASSERT_TRUE(beyond.status().ok()) << beyond.status();
  const absl::Status status = beyond.ComputeStatus(0);
  EXPECT_EQ(status.code(), absl::StatusCode::kOutOfRange) << status;
}

TEST_F(TokenDatasetTest, DirectoriesAndPatternsListRegularFilesInNameOrder) {
  Write("shards/b.u32", Counting(10, 3));
  Write("shards/a.u32", Counting(0, 3));
  Write("shards/.hidden.u32", Counting(900, 3));
  Write("shards/c.txt", Counting(20, 3));
  std::filesystem::create_directories(directory_ + "/shards/sub");
  // A directory: a, b, c.txt (not .hidden, not sub), in order; N = 9 tokens, T = 2: S = 4.
  DatasetConfig config{
      .sources = {{directory_ + "/shards"}}, .in_order = true, .global_batch = 4, .sequence = 2};
  Reader listed(config);
  ASSERT_TRUE(listed.status().ok()) << listed.status();
  EXPECT_EQ(listed.Rows(0),
            (std::vector<std::vector<int64_t>>{{0, 1}, {2, 10}, {11, 12}, {20, 21}}));
  // A pattern: a and b only.
  config.sources = {{directory_ + "/shards/*.u32"}};
  config.global_batch = 2;
  Reader matched(config);
  ASSERT_TRUE(matched.status().ok()) << matched.status();
  EXPECT_EQ(matched.Rows(0), (std::vector<std::vector<int64_t>>{{0, 1}, {2, 10}}));
}

TEST_F(TokenDatasetTest, BadDatasetsAreRefusedNamingTheCulprit) {
  const std::string path = Write("a.bin", Counting(0, 20));
  auto error = [&](DatasetConfig config) { return Reader(config).status(); };

  absl::Status status = error({.sources = {{path, path}}});
  EXPECT_THAT(status.message(), HasSubstr("named twice"));
  EXPECT_THAT(status.message(), HasSubstr("source 0"));

  status = error({.sources = {{path}, {directory_ + "/missing-*.bin"}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;
  EXPECT_THAT(status.message(), HasSubstr("source 1"));
  EXPECT_THAT(status.message(), HasSubstr("matches no regular file"));

  std::filesystem::create_directories(directory_ + "/empty");
  status = error({.sources = {{directory_ + "/empty"}}});
  EXPECT_EQ(status.code(), absl::StatusCode::kNotFound) << status;

  status = error({.sources = {{directory_ + "/*/a.bin"}}});
  EXPECT_THAT(status.message(), HasSubstr("only the last component"));

  status = error({.sources = {{path}}, .sequence = 20});
  EXPECT_THAT(status.message(),
              HasSubstr(") hold 20 tokens, but a sample of sequence 20 needs 21"));

  Write("odd.u16", Counting(0, 3), "bytes");
  status = error({.sources = {{directory_ + "/odd.u16"}}, .formats = {"uint16"}});
  EXPECT_THAT(status.message(), HasSubstr("not a whole number of uint16 tokens"));

  status = error({.sources = {{path}}, .formats = {"utf8"}});
  EXPECT_THAT(status.message(), HasSubstr("source 0: 'format' must be"));

  status = error({.sources = {{path}, {path}}, .weights = {1}});
  EXPECT_THAT(status.message(), HasSubstr("one entry per source"));

  status = error({.sources = {{path}, {Write("b.bin", Counting(0, 20))}}, .weights = {1, 1e-5}});
  EXPECT_THAT(status.message(), HasSubstr("source 1: weight"));

  status = error({.sources = {{path}}, .weights = {-1}});
  EXPECT_THAT(status.message(), HasSubstr("not a finite number > 0"));

  status = error({.sources = {{path}}, .end_of_text = -1});
  EXPECT_THAT(status.message(), HasSubstr("'end_of_text' must be >= 0"));
}

TEST_F(TokenDatasetTest, PathsOutsideTheDataRootsAreRefused) {
  const std::string path = Write("a.bin", Counting(0, 20));
  std::filesystem::create_directories(directory_ + "/root");
  absl::StatusOr<FileRoots> roots = FileRoots::Beneath({directory_ + "/root"}, "--data-root");
  ASSERT_TRUE(roots.ok()) << roots.status();
  Reader reader({.sources = {{path}}}, &*roots);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kPermissionDenied) << reader.status();
  EXPECT_THAT(reader.status().message(), HasSubstr("--data-root"));

  // A pattern lists beneath the root only; a symlink in the directory is left out.
  Write("root/shard-0.bin", Counting(0, 20));
  std::filesystem::create_symlink(path, directory_ + "/root/shard-1.bin");
  Reader beneath({.sources = {{directory_ + "/root/shard-*.bin"}}, .in_order = true}, &*roots);
  ASSERT_TRUE(beneath.status().ok()) << beneath.status();
  EXPECT_EQ(beneath.Rows(0)[0], Counting(0, 5));
}

TEST_F(TokenDatasetTest, AFileTruncatedAfterOpeningFailsTheActNamingIt) {
  const std::string path = Write("a.bin", Counting(0, 400));
  DatasetConfig config{.sources = {{path}}, .global_batch = 8};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  std::filesystem::resize_file(path, 4 * 10);
  absl::Status status = absl::OkStatus();
  for (int64_t step = 0; step < 10 && status.ok(); ++step) status = reader.ComputeStatus(step);
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss) << status;
  EXPECT_THAT(status.message(), HasSubstr(path));
}

TEST_F(TokenDatasetTest, Uint32TokensBeyondInt32AreRefusedForInt32Outputs) {
  const std::string path = Write("a.bin", std::vector<int64_t>(20, int64_t{1} << 31));
  DatasetConfig config{.sources = {{path}}, .data_type = plan::INT32};
  Reader reader(config);
  ASSERT_TRUE(reader.status().ok()) << reader.status();
  const absl::Status status = reader.ComputeStatus(0);
  EXPECT_THAT(status.message(), HasSubstr("beyond the output's integer type"));
}

}  // namespace
}  // namespace loom::kernel_test
