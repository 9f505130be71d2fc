// JobOptions::sink_piece_callback through RunPlanLocally: every piece every sink keeps is
// reported, from the sinks' threads, and an error from the callback fails the job.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/sink_actor.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"
#include "node/local_run.h"
#include "compiler/compile_for_devices.h"

namespace loom {
namespace {

using ::testing::HasSubstr;
using ::testing::UnorderedElementsAre;

constexpr char kJob[] = R"pb(
  name: "layer"
  placement { devices: [ "cpu:0", "cpu:1" ] }
  num_steps: 3
  inputs {
    name: "x"
    shape: [ 8, 4 ]
    sbp: "S(0)"
    random_normal { std: 1 seed: 1 }
  }
  variables {
    name: "w"
    shape: [ 4, 2 ]
    sbp: "B"
    initializer { normal { std: 1 seed: 2 } }
  }
  ops {
    name: "y"
    type: "matmul"
    inputs: [ "x", "w" ]
    outputs: "y"
  }
  fetch: "y"
)pb";

class SinkPieceCallbackTest : public ::testing::Test {
 protected:
  void SetUp() override {
    job::Job job;
    ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(kJob, &job));
    auto compiled =
        compiler::CompileJobWithStandardOps(std::move(job), compiler::DeviceSet::Cpus(2, 1));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    compiled_ = std::move(*compiled);
    ASSERT_TRUE(RegisterCpuKernels(&kernels_).ok());
  }

  const plan::Plan& plan() const { return compiled_->result.plan; }

  std::unique_ptr<compiler::CompiledJob> compiled_;
  KernelRegistry kernels_;
};

TEST_F(SinkPieceCallbackTest, ReportsEveryPieceEverySinkKeeps) {
  struct Reported {
    std::string sink;
    int input;
    int64_t piece;
    HostTensor tensor;
  };
  std::mutex mutex;
  std::vector<Reported> reported;
  JobOptions options;
  options.sink_piece_callback = [&](const SinkPiece& piece) {
    std::lock_guard<std::mutex> lock(mutex);
    reported.push_back({piece.sink, piece.input, piece.piece, piece.tensor});
    return absl::OkStatus();
  };
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan(), kernels_, std::move(options));
  ASSERT_TRUE(run.ok()) << run.status();

  ASSERT_EQ(plan().fetches_size(), 1);
  const plan::Fetch& fetch = plan().fetches(0);
  ASSERT_EQ(fetch.sinks_size(), 2);
  std::vector<std::pair<std::string, int64_t>> keys;
  for (const Reported& piece : reported) {
    keys.emplace_back(piece.sink, piece.piece);
    EXPECT_EQ(piece.input, 0);
    // What was reported is what the sink kept.
    auto kept = FetchedPieces(*run->runtime, piece.sink);
    ASSERT_TRUE(kept.ok());
    const HostTensor& same = (**kept)[0].at(piece.piece);
    EXPECT_EQ(piece.tensor.shape, same.shape);
    EXPECT_EQ(piece.tensor.bytes, same.bytes);
  }
  const std::string& sink0 = fetch.sinks(0);
  const std::string& sink1 = fetch.sinks(1);
  EXPECT_THAT(keys,
              UnorderedElementsAre(std::pair(sink0, 0), std::pair(sink0, 1), std::pair(sink0, 2),
                                   std::pair(sink1, 0), std::pair(sink1, 1), std::pair(sink1, 2)));
  // The sinks still keep everything for the fetches.
  ASSERT_EQ(run->fetched.at("y").size(), 3u);
}

// The memory the job's devices hold once it ended.
int64_t UsedBytes(const JobRuntime& runtime) {
  int64_t used = 0;
  for (const auto& memory : runtime.device_memories()) used += memory->used_bytes();
  return used;
}

TEST_F(SinkPieceCallbackTest, WithoutKeepingSinksReportEveryPieceAndHoldNone) {
  absl::StatusOr<LocalRunResult> kept = RunPlanLocally(plan(), kernels_, JobOptions());
  ASSERT_TRUE(kept.ok()) << kept.status();
  int64_t kept_bytes = 0;
  for (const std::string& sink : plan().fetches(0).sinks()) {
    auto pieces = FetchedPieces(*kept->runtime, sink);
    ASSERT_TRUE(pieces.ok());
    for (const HostTensor& piece : (**pieces)[0]) kept_bytes += piece.bytes.size();
  }
  ASSERT_GT(kept_bytes, 0);

  std::mutex mutex;
  int reported = 0;
  JobOptions options;
  options.keep_sink_pieces = false;
  options.sink_piece_callback = [&](const SinkPiece& piece) {
    EXPECT_EQ(piece.tensor.bytes.size(), 32u);  // a [4, 2] float32 piece, whole while reported
    std::lock_guard<std::mutex> lock(mutex);
    ++reported;
    return absl::OkStatus();
  };
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan(), kernels_, std::move(options));
  ASSERT_TRUE(run.ok()) << run.status();
  EXPECT_EQ(reported, 6);  // 2 sinks x 3 steps
  for (const std::string& sink : plan().fetches(0).sinks()) {
    auto pieces = FetchedPieces(*run->runtime, sink);
    ASSERT_TRUE(pieces.ok());
    for (const std::vector<HostTensor>& input : **pieces) EXPECT_TRUE(input.empty()) << sink;
  }
  // What the kept copies were charged is free again; nothing else differs.
  EXPECT_EQ(UsedBytes(*run->runtime), UsedBytes(*kept->runtime) - kept_bytes);
}

// The highest memory use of each of the job's devices.
std::vector<int64_t> PeakBytes(const JobRuntime& runtime) {
  std::vector<int64_t> peaks;
  for (const auto& memory : runtime.device_memories()) peaks.push_back(memory->peak_bytes());
  return peaks;
}

TEST_F(SinkPieceCallbackTest, OnlyTheReportedSinksReportAndTheOthersCopyNothing) {
  const plan::Fetch& fetch = plan().fetches(0);
  ASSERT_EQ(fetch.sinks_size(), 2);
  auto run_reporting = [&](std::vector<std::string> sinks,
                           std::vector<std::string>* reported) -> std::vector<int64_t> {
    std::mutex mutex;
    JobOptions options;
    options.keep_sink_pieces = false;
    options.reported_sinks.emplace(sinks.begin(), sinks.end());
    options.sink_piece_callback = [&](const SinkPiece& piece) {
      std::lock_guard<std::mutex> lock(mutex);
      reported->push_back(piece.sink);
      return absl::OkStatus();
    };
    absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan(), kernels_, std::move(options));
    EXPECT_TRUE(run.ok()) << run.status();
    if (!run.ok()) return {};
    // Neither sink holds a piece once the job ended.
    for (const std::string& sink : fetch.sinks()) {
      auto pieces = FetchedPieces(*run->runtime, sink);
      EXPECT_TRUE(pieces.ok());
      if (pieces.ok()) {
        for (const std::vector<HostTensor>& input : **pieces) EXPECT_TRUE(input.empty()) << sink;
      }
    }
    return PeakBytes(*run->runtime);
  };
  std::vector<std::string> reported_by_both;
  const std::vector<int64_t> both =
      run_reporting({fetch.sinks(0), fetch.sinks(1)}, &reported_by_both);
  EXPECT_EQ(reported_by_both.size(), 6u);
  std::vector<std::string> reported_by_one;
  const std::vector<int64_t> one = run_reporting({fetch.sinks(0)}, &reported_by_one);
  EXPECT_THAT(reported_by_one, ::testing::Each(fetch.sinks(0)));
  EXPECT_EQ(reported_by_one.size(), 3u);
  // The unreported sink (on cpu:1) never charged its device for a copy: a [4, 2] float32 piece.
  ASSERT_EQ(both.size(), 2u);
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0], both[0]);
  EXPECT_EQ(one[1], both[1] - 32);
}

TEST_F(SinkPieceCallbackTest, AnErrorFailsTheJob) {
  JobOptions options;
  options.sink_piece_callback = [](const SinkPiece& piece) {
    if (piece.piece == 1) return absl::DataLossError("the step printer is gone");
    return absl::OkStatus();
  };
  absl::StatusOr<LocalRunResult> run = RunPlanLocally(plan(), kernels_, std::move(options));
  ASSERT_FALSE(run.ok());
  EXPECT_THAT(run.status().ToString(), HasSubstr("the step printer is gone"));
}

}  // namespace
}  // namespace loom
