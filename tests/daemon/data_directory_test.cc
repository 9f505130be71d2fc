// loomd --data-dir: the coordinator's jobs (events, plans, traces, ids) survive a restart, two
// daemons never share one directory, and a job whose record cannot be written (a full disk) is
// refused with why, runs not, and its id is never handed out again.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/daemon.h"
#include "daemon/job_store.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"
#include "tests/test_directory.h"

namespace loom::daemon::testing {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using ::testing::HasSubstr;

// While it lives, no file this process writes may grow beyond `bytes` (RLIMIT_FSIZE), and such a
// write fails with EFBIG instead of raising SIGXFSZ: a full disk, for the data directory.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit limit = saved_;
    limit.rlim_cur = bytes;
    EXPECT_EQ(setrlimit(RLIMIT_FSIZE, &limit), 0) << std::strerror(errno);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit saved_{};
  void (*previous_handler_)(int) = SIG_DFL;
};

class DataDirectoryTest : public DaemonTest {
 protected:
  void SetUp() override {
    directory_ = loom::testing::FreshTestDirectory("loomd-data");
    StartDaemon(Options());
  }

  DaemonOptions Options() const {
    DaemonOptions options = TestOptions();
    options.data_directory = directory_;
    return options;
  }

  v1::GetPlanResponse GetPlan(const std::string& id) {
    v1::GetPlanRequest request;
    request.set_job_id(id);
    v1::GetPlanResponse response;
    grpc::Status status = jobs_->GetPlan(ContextWithDeadline().get(), request, &response);
    EXPECT_TRUE(status.ok()) << status.error_message();
    return response;
  }

  grpc::Status GetTrace(const std::string& id, v1::GetTraceResponse* response) {
    v1::GetTraceRequest request;
    request.set_job_id(id);
    return jobs_->GetTrace(ContextWithDeadline().get(), request, response);
  }

  std::string directory_;
};

TEST_F(DataDirectoryTest, EndedJobsTheirEventsPlansTracesAndIdsSurviveARestart) {
  const std::string id = SubmitTracedOrDie(TrainingJob(3));
  const std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  v1::JobInfo before;
  ASSERT_TRUE(GetJob(id, &before).ok());
  const v1::GetPlanResponse plan = GetPlan(id);
  v1::GetTraceResponse trace;
  ASSERT_TRUE(GetTrace(id, &trace).ok());

  StartDaemon(Options());
  v1::JobInfo after;
  ASSERT_TRUE(GetJob(id, &after).ok());
  EXPECT_TRUE(MessageDifferencer::Equals(after, before));
  const std::vector<v1::JobEvent> watched = WatchToEnd(id);
  ASSERT_EQ(watched.size(), events.size());
  for (size_t index = 0; index < events.size(); ++index) {
    EXPECT_TRUE(MessageDifferencer::Equals(watched[index], events[index])) << index;
  }
  EXPECT_EQ(StepsOf(watched).size(), 3u);
  EXPECT_TRUE(MessageDifferencer::Equals(GetPlan(id), plan));
  v1::GetTraceResponse restored_trace;
  grpc::Status status = GetTrace(id, &restored_trace);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(restored_trace.chrome_trace_json(), trace.chrome_trace_json());
  EXPECT_EQ(restored_trace.acts(), trace.acts());

  // Ids go on from the last one: a watcher of job-1 never sees another job under its id.
  EXPECT_EQ(SubmitOrDie(TrainingJob(1)), "job-2");
}

// With a data directory an ended job's plan and trace are read from it, not kept in memory as
// well: once their files are gone, GetPlan and GetTrace say so.
TEST_F(DataDirectoryTest, AnEndedJobsPlanAndTraceAreReadFromTheDirectory) {
  const std::string id = SubmitTracedOrDie(TrainingJob(3));
  WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  const v1::GetPlanResponse plan = GetPlan(id);
  EXPECT_GT(plan.plan().tasks_size(), 0);
  v1::GetTraceResponse trace;
  ASSERT_TRUE(GetTrace(id, &trace).ok());
  EXPECT_GT(trace.acts(), 0);
  EXPECT_THAT(trace.chrome_trace_json(), HasSubstr("traceEvents"));
  absl::StatusOr<JobStore> store = JobStore::Open(directory_);
  ASSERT_TRUE(store.ok()) << store.status();
  absl::StatusOr<v1::GetPlanResponse> stored = store->LoadPlan(1);
  ASSERT_TRUE(stored.ok()) << stored.status();
  EXPECT_TRUE(MessageDifferencer::Equals(*stored, plan));

  const std::filesystem::path jobs = std::filesystem::path(directory_) / "jobs";
  ASSERT_TRUE(std::filesystem::remove(jobs / "job-1.plan.binpb"));
  ASSERT_TRUE(std::filesystem::remove(jobs / "job-1.trace.json"));
  v1::GetPlanRequest plan_request;
  plan_request.set_job_id(id);
  v1::GetPlanResponse lost_plan;
  // The compiled job is dropped just after the job's end is recorded: until then GetPlan still
  // answers from it.
  grpc::Status status;
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  do {
    status = jobs_->GetPlan(ContextWithDeadline().get(), plan_request, &lost_plan);
  } while (status.ok() && absl::Now() < deadline);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(status.error_message(),
              HasSubstr("the plan of job 'job-1' is lost from the data directory"));
  v1::GetTraceResponse lost_trace;
  status = GetTrace(id, &lost_trace);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DATA_LOSS);
  EXPECT_THAT(status.error_message(),
              HasSubstr("the trace of job 'job-1' is lost from the data directory"));
}

TEST_F(DataDirectoryTest, StreamedFetchedTensorsAreNotKeptAcrossARestart) {
  const std::string id = SubmitStreamingOrDie(CountingJob(2, "ones_total", "ones_per_column"));
  const std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  auto fetched = [](const std::vector<v1::JobEvent>& events) {
    return std::count_if(events.begin(), events.end(),
                         [](const v1::JobEvent& event) { return event.has_fetched(); });
  };
  ASSERT_EQ(fetched(events), 12);  // 2 steps of 2 micro-batches, 3 tensors (the loss too)

  StartDaemon(Options());
  const std::vector<v1::JobEvent> watched = WatchToEnd(id);
  EXPECT_EQ(fetched(watched), 0);
  EXPECT_EQ(StatesOf(watched), StatesOf(events));
  EXPECT_EQ(StepsOf(watched).size(), 2u);
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(id, &info).ok());
  EXPECT_TRUE(info.streams_fetches());
  EXPECT_TRUE(info.fetches_released());
}

TEST_F(DataDirectoryTest, JobsCancelledAtShutdownStayCancelledAndForgottenJobsStayForgotten) {
  DaemonOptions options = Options();
  options.max_finished_jobs = 2;
  StartDaemon(options);
  for (int job = 1; job <= 3; ++job) WatchToEnd(SubmitOrDie(TrainingJob(1)));
  // job-5 waits behind job-4 when the daemon shuts down: it is cancelled.
  const std::string running = SubmitOrDie(SlowJob(1000, 100000));
  const std::string pending = SubmitOrDie(TrainingJob(1));
  ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));

  StartDaemon(options);
  v1::JobInfo info;
  EXPECT_EQ(GetJob("job-1", &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJob("job-2", &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(GetJob("job-3", &info).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(GetJob(running, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(info.error().message(), HasSubstr("shut down"));
  ASSERT_TRUE(GetJob(pending, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(SubmitOrDie(TrainingJob(1)), "job-6");
  EXPECT_FALSE(std::filesystem::exists(std::filesystem::path(directory_) / "jobs/job-1.binpb"));
  EXPECT_FALSE(
      std::filesystem::exists(std::filesystem::path(directory_) / "jobs/job-1.plan.binpb"));
}

// The store's writes are made off the manager's lock (daemon/job_store_writer.h), but a submitted
// job's are waited for: once its id reached the client, the job is on disk.
TEST_F(DataDirectoryTest, ASubmittedJobIsOnDiskWhenItsIdReachesTheClient) {
  const std::string id = SubmitOrDie(SlowJob(1000, 100000));
  absl::StatusOr<JobStore> store = JobStore::Open(directory_);
  ASSERT_TRUE(store.ok()) << store.status();
  JobStore::Contents contents = store->Load();
  EXPECT_EQ(contents.last_number, 1);
  ASSERT_EQ(contents.jobs.size(), 1u);
  EXPECT_EQ(contents.jobs[0].info().job_id(), id);
  EXPECT_TRUE(store->LoadPlan(1).ok());
  v1::CancelJobRequest cancel;
  cancel.set_job_id(id);
  v1::CancelJobResponse cancelled;
  ASSERT_TRUE(jobs_->CancelJob(ContextWithDeadline().get(), cancel, &cancelled).ok());
}

TEST_F(DataDirectoryTest, ASubmissionWhoseRecordCannotBeWrittenFailsNamingTheDirectory) {
  v1::SubmitJobResponse response;
  grpc::Status status;
  {
    FileSizeLimit full(64);  // its number ("1\n") fits, its plan does not
    status = Submit(SlowJob(1000, 100000), &response);
  }
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr(directory_));
  EXPECT_THAT(status.error_message(), HasSubstr(std::strerror(EFBIG)));
  // Nothing of it waits or runs.
  v1::ListJobsRequest list;
  v1::ListJobsResponse listed;
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), list, &listed).ok());
  for (const v1::JobInfo& job : listed.jobs()) {
    EXPECT_EQ(job.state(), v1::JOB_STATE_CANCELLED) << job.job_id();
    EXPECT_THAT(job.error().message(), HasSubstr("is not kept on disk"));
  }
  // No temporary file is left behind. The cancelled record is written on the store's thread, so
  // its temporary file may be seen in flight: a leftover one is one that never goes away.
  auto temporary_files = [&] {
    std::vector<std::string> names;
    for (const auto& entry : std::filesystem::directory_iterator(directory_ + "/jobs")) {
      const std::string name = entry.path().filename().string();
      if (absl::StrContains(name, ".tmp")) names.push_back(name);
    }
    return names;
  };
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!temporary_files().empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_THAT(temporary_files(), ::testing::IsEmpty());
  // Its id is never handed out, not even after a restart.
  EXPECT_EQ(SubmitOrDie(TrainingJob(1)), "job-2");
  StartDaemon(Options());
  EXPECT_EQ(SubmitOrDie(TrainingJob(1)), "job-3");
}

TEST_F(DataDirectoryTest, AnUnreadableJobFileIsSkippedNotFatal) {
  WatchToEnd(SubmitOrDie(TrainingJob(1)));
  std::ofstream(std::filesystem::path(directory_) / "jobs/job-9.binpb") << "not a stored job";
  StartDaemon(Options());
  v1::JobInfo info;
  EXPECT_TRUE(GetJob("job-1", &info).ok());
  EXPECT_EQ(GetJob("job-9", &info).error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(SubmitOrDie(TrainingJob(1)), "job-2");
}

TEST_F(DataDirectoryTest, ASecondDaemonCannotUseTheSameDirectory) {
  DaemonOptions second = Options();
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(second);
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(daemon.status().message(),
              HasSubstr(absl::StrCat("is in use by another loomd (pid ", getpid(), ")")));
  // A worker locks its directory too.
  second.coordinator_address = "127.0.0.1:1";
  daemon = Daemon::Start(second);
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST_F(DataDirectoryTest, ADirectoryThatCannotBeCreatedIsInvalidArgument) {
  std::ofstream(std::filesystem::path(directory_) / "a-file") << "x";
  DaemonOptions options = TestOptions();
  options.data_directory = (std::filesystem::path(directory_) / "a-file" / "below").string();
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(daemon.status().message(), HasSubstr("--data-dir"));
  EXPECT_THAT(daemon.status().message(), HasSubstr("a-file"));
}

}  // namespace
}  // namespace loom::daemon::testing
