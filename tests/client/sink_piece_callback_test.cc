// JobOptions::sink_piece_callback through RunPlanLocally: every piece every sink keeps is
// reported, from the sinks' threads, and an error from the callback fails the job.
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "actors/sink_actor.h"
#include "client/local_run.h"
#include "client/loomctl/compile_command.h"
#include "gmock/gmock.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/kernel_registry.h"

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
        loomctl::CompileJobWithStandardOps(std::move(job), compiler::DeviceSet::Cpus(2, 1));
    ASSERT_TRUE(compiled.ok()) << compiled.status();
    compiled_ = std::move(*compiled);
    ASSERT_TRUE(RegisterCpuKernels(&kernels_).ok());
  }

  const plan::Plan& plan() const { return compiled_->result.plan; }

  std::unique_ptr<loomctl::CompiledJob> compiled_;
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
