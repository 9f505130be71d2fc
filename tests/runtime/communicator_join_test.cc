// JobRuntime's joining of communicators (the step NCCL between nodes needs before a job starts),
// with backends that need joining around the shared-memory backend: which ids the runtime
// publishes, that every join starts before any is waited for, and that a join ends at its
// deadline or at an abort, failing the job.
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "glog/logging.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "runtime/collective_backend.h"
#include "runtime/collectives/shared_memory_collectives.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What the backends of one job were asked, in order, how many joins have started, and which
// backends were aborted. (std::mutex, as in the runtime: ThreadSanitizer sees into it.)
class JoinLog {
 public:
  void Add(const std::string& entry) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      entries_.push_back(entry);
      if (absl::StartsWith(entry, "start")) ++starts_;
    }
    changed_.notify_all();
  }
  std::vector<std::string> entries() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return entries_;
  }
  void Abort(const std::string& communicator) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      aborted_.insert(communicator);
    }
    changed_.notify_all();
  }
  bool aborted(const std::string& communicator) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return aborted_.contains(communicator);
  }
  // Waits until `communicator` is aborted, `deadline` passes, or (when `starts` > 0) `starts`
  // joins started. OK when they started; the abort or the deadline otherwise.
  absl::Status Await(const std::string& communicator, int starts, absl::Time deadline) {
    std::unique_lock<std::mutex> lock(mutex_);
    auto settled = [&] {
      return aborted_.contains(communicator) || (starts > 0 && starts_ >= starts);
    };
    changed_.wait_until(lock, absl::ToChronoTime(deadline), settled);
    if (aborted_.contains(communicator)) {
      return absl::AbortedError(absl::StrCat(communicator, ": aborted"));
    }
    if (starts > 0 && starts_ >= starts) return absl::OkStatus();
    return absl::DeadlineExceededError(absl::StrCat(communicator, ": the peers never came"));
  }

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<std::string> entries_;
  int starts_ = 0;
  std::set<std::string> aborted_;
};

// A backend whose ranks on "other nodes" must join before it runs: it makes `made_id` (empty:
// not the node of rank 0), records its join calls, and finishes joining once `expected_starts`
// joins of the job started (so a runtime that waited for one join before starting the next would
// wait in vain), or never when `peers_join` is false. With `fail_start` its StartJoin fails.
class JoiningBackend final : public CollectiveBackend {
 public:
  JoiningBackend(const plan::Communicator& communicator, std::string made_id, int expected_starts,
                 bool peers_join, bool fail_start, JoinLog* log)
      : inner_(communicator, SharedMemoryOptions()),
        made_id_(std::move(made_id)),
        expected_starts_(expected_starts),
        peers_join_(peers_join),
        fail_start_(fail_start),
        log_(log) {}

  const std::string& communicator() const override { return inner_.communicator(); }
  int size() const override { return inner_.size(); }
  absl::string_view transport() const override { return "test"; }
  absl::Status Run(const CollectiveCall& call) override {
    if (!joined_) return absl::FailedPreconditionError("ran before joining");
    return inner_.Run(call);
  }
  void Abort(absl::Status reason) override {
    log_->Abort(communicator());
    inner_.Abort(std::move(reason));
  }
  std::string join_id() const override { return made_id_; }
  absl::Status StartJoin(const std::string& id) override {
    log_->Add(absl::StrCat("start ", communicator(), " with '", id, "'"));
    if (fail_start_) {
      return absl::InternalError(absl::StrCat(communicator(), ": NCCL refused the id"));
    }
    return absl::OkStatus();
  }
  absl::Status FinishJoin(absl::Time deadline) override {
    log_->Add(absl::StrCat("finish ", communicator()));
    absl::Status status = log_->Await(communicator(), peers_join_ ? expected_starts_ : 0, deadline);
    joined_ = status.ok();
    return status;
  }

 private:
  static SharedMemoryCollectives::Options SharedMemoryOptions() {
    SharedMemoryCollectives::Options options;
    options.timeout = absl::Seconds(30);
    return options;
  }

  SharedMemoryCollectives inner_;
  const std::string made_id_;
  const int expected_starts_;
  const bool peers_join_;
  const bool fail_start_;
  JoinLog* const log_;
  bool joined_ = false;  // set before Start, read by the ranks after it
};

// Two CPU devices; per rank r a source of pieces (test_piece), an all-reduce on communicator "a"
// and one on "b" (both over the two devices, each on a communication stream of its own), and a
// sink of both sums.
plan::Plan TwoCommunicatorPlan(int pieces) {
  PlanBuilder builder("joined");
  builder.AddCpuDevices(2);
  for (const char* name : {"a", "b"}) {
    plan::Communicator* communicator = builder.mutable_plan().add_communicators();
    communicator->set_name(name);
    for (int device = 0; device < 2; ++device) {
      plan::Device* added = communicator->add_devices();
      added->set_type(plan::CPU);
      added->set_index(device);
    }
    communicator->set_num_collectives(1);
  }
  const std::vector<std::string> names = {"a", "b"};
  for (int rank = 0; rank < 2; ++rank) {
    const std::string x = absl::StrCat("x", rank);
    builder.AddRegister(x, {3}, plan::FLOAT32, 2);
    builder.AddTask(absl::StrCat("source", rank), plan::SOURCE, rank, {}, {x}, "test_piece")
        .set_num_pieces(pieces);
    std::vector<std::string> sums;
    for (int index = 0; index < 2; ++index) {
      const std::string& name = names[index];
      const std::string sum = absl::StrCat("sum_", name, rank);
      builder.AddRegister(sum, {3}, plan::FLOAT32, 2);
      plan::Task& task =
          builder.AddTask(absl::StrCat("reduce_", name, rank), plan::COLLECTIVE, rank, {x}, {sum});
      task.mutable_stream()->set_kind(plan::STREAM_COMMUNICATION);
      task.mutable_stream()->set_index(index);  // a communication stream per communicator
      plan::CollectiveConf* conf = task.mutable_collective();
      conf->set_communicator(name);
      conf->set_kind(plan::ALL_REDUCE);
      conf->set_sequence(0);
      conf->set_name(absl::StrCat("sum_", name));
      task.set_rank(rank);
      sums.push_back(sum);
    }
    builder.AddTask(absl::StrCat("sink", rank), plan::SINK, rank, sums, {});
  }
  return builder.plan();
}

struct JoinedJob {
  JoinLog log;
  std::unique_ptr<JobRuntime> runtime;
};

// The plan above, with "a"'s backend making the id "id-of-a" (its rank 0 is "here") and "b"'s
// none (its rank 0 is "elsewhere"); the backend of `failing_start` fails to start joining.
std::unique_ptr<JoinedJob> MakeJoinedJob(bool peers_join, const std::string& failing_start = "") {
  auto job = std::make_unique<JoinedJob>();
  JobOptions options;
  options.collective_backend_factory =
      [&job = *job, peers_join, failing_start](
          const plan::Communicator& communicator,
          const plan::Plan&) -> absl::StatusOr<std::unique_ptr<CollectiveBackend>> {
    return std::make_unique<JoiningBackend>(
        communicator, communicator.name() == "a" ? "id-of-a" : "", 2, peers_join,
        communicator.name() == failing_start, &job.log);
  };
  absl::StatusOr<std::unique_ptr<JobRuntime>> runtime = MakeJob(TwoCommunicatorPlan(3), options);
  CHECK(runtime.ok()) << runtime.status();
  job->runtime = *std::move(runtime);
  return job;
}

TEST(CommunicatorJoinTest, EveryJoinStartsWithItsIdBeforeAnyIsAwaitedThenTheJobRuns) {
  std::unique_ptr<JoinedJob> job = MakeJoinedJob(/*peers_join=*/true);
  EXPECT_EQ(job->runtime->CommunicatorJoinIds(),
            (std::map<std::string, std::string>{{"a", "id-of-a"}}));
  // "b"'s id comes from another node (through the coordinator, in a cluster).
  ASSERT_TRUE(
      job->runtime->JoinCommunicators({{"a", "id-of-a"}, {"b", "id-of-b"}}, absl::Seconds(30))
          .ok());
  EXPECT_THAT(job->log.entries(), ElementsAre("start a with 'id-of-a'", "start b with 'id-of-b'",
                                              "finish a", "finish b"));
  ASSERT_TRUE(job->runtime->Run().ok());
  // Both ranks bring piece p (test_piece), so every sum is 2p.
  EXPECT_THAT(SinkValues(*job->runtime, "sink0", 0), ElementsAre(0.0f, 2.0f, 4.0f));
  EXPECT_THAT(SinkValues(*job->runtime, "sink1", 1), ElementsAre(0.0f, 2.0f, 4.0f));
}

TEST(CommunicatorJoinTest, AJoinPastItsDeadlineFailsTheJobAndAbortsEveryBackend) {
  std::unique_ptr<JoinedJob> job = MakeJoinedJob(/*peers_join=*/false);
  const absl::Time start = absl::Now();
  const absl::Status status = job->runtime->JoinCommunicators({}, absl::Milliseconds(200));
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_THAT(status.message(), HasSubstr("a: the peers never came"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  // The job failed: "b", never waited for, was aborted too.
  EXPECT_TRUE(job->log.aborted("a"));
  EXPECT_TRUE(job->log.aborted("b"));
  ASSERT_TRUE(job->runtime->Start().ok());
  EXPECT_EQ(job->runtime->Wait().code(), absl::StatusCode::kDeadlineExceeded);
}

TEST(CommunicatorJoinTest, AJoinThatCannotStartEndsTheJoinsStartedBeforeIt) {
  std::unique_ptr<JoinedJob> job = MakeJoinedJob(/*peers_join=*/false, /*failing_start=*/"b");
  const absl::Time start = absl::Now();
  const absl::Status status =
      job->runtime->JoinCommunicators({{"a", "id-of-a"}, {"b", "id-of-b"}}, absl::Seconds(60));
  EXPECT_EQ(status.code(), absl::StatusCode::kInternal) << status;
  EXPECT_THAT(status.message(), HasSubstr("b: NCCL refused the id"));
  // "a" had started joining; it is told to finish at once (and ends, aborted) instead of
  // joining in the background until the job is released.
  EXPECT_THAT(job->log.entries(), ElementsAre("start a with 'id-of-a'", "start b with 'id-of-b'",
                                              "finish a", "finish b"));
  EXPECT_TRUE(job->log.aborted("a"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CommunicatorJoinTest, AnAbortEndsAJoinAtOnce) {
  std::unique_ptr<JoinedJob> job = MakeJoinedJob(/*peers_join=*/false);
  std::thread aborter([&] {
    absl::SleepFor(absl::Milliseconds(100));
    job->runtime->Abort(absl::CancelledError("the coordinator cancelled the job"));
  });
  const absl::Time start = absl::Now();
  const absl::Status status = job->runtime->JoinCommunicators({}, absl::Seconds(60));
  aborter.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kAborted) << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(CommunicatorJoinTest, BackendsThatNeedNoJoiningMakeItANoOp) {
  absl::StatusOr<std::unique_ptr<JobRuntime>> runtime = MakeJob(TwoCommunicatorPlan(2));
  ASSERT_TRUE(runtime.ok()) << runtime.status();
  EXPECT_TRUE((*runtime)->CommunicatorJoinIds().empty());
  EXPECT_TRUE((*runtime)->JoinCommunicators({}, absl::Seconds(1)).ok());
  EXPECT_TRUE((*runtime)->Run().ok());
}

}  // namespace
}  // namespace loom::testing
