// CancelJob on pending and running jobs, and a daemon shutting down with jobs in flight.
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "daemon/job_admission.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Not;

grpc::Status Cancel(v1::JobService::Stub& jobs, const std::string& id, v1::JobInfo* info) {
  v1::CancelJobRequest request;
  request.set_job_id(id);
  request.set_reason("the test is done with it");
  v1::CancelJobResponse response;
  grpc::Status status = jobs.CancelJob(ContextWithDeadline().get(), request, &response);
  *info = response.job();
  return status;
}

class CancelTest : public DaemonTest {
 protected:
  // Behind a running job two short jobs wait, and a third is refused (RESOURCE_EXHAUSTED, its
  // message holding each of `says`) until one of the two is cancelled.
  void ExpectAThirdWaitingJobRefusedUntilOneLeaves(const std::vector<std::string>& says) {
    // 10000 steps of 2 ms: far longer than the test.
    const std::string running = SubmitOrDie(SlowJob(10000, 2000));
    ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));
    const std::string first = SubmitOrDie(SlowJob(1, 0));
    SubmitOrDie(SlowJob(1, 0));
    v1::SubmitJobResponse response;
    grpc::Status refused = Submit(SlowJob(1, 0), &response);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED)
        << refused.error_message();
    for (const std::string& said : says) EXPECT_THAT(refused.error_message(), HasSubstr(said));
    // A cancelled pending job leaves room.
    v1::JobInfo info;
    ASSERT_TRUE(Cancel(*jobs_, first, &info).ok());
    grpc::Status queued = Submit(SlowJob(1, 0), &response);
    EXPECT_TRUE(queued.ok()) << queued.error_message();
  }
};

TEST_F(CancelTest, AFullQueueRefusesJobsUntilOneLeavesIt) {
  DaemonOptions options = TestOptions();
  options.max_pending_jobs = 2;
  StartDaemon(options);
  ExpectAThirdWaitingJobRefusedUntilOneLeaves(
      {"job 'slow' cannot be queued: 2 jobs are waiting", "--max-pending-jobs"});
}

TEST_F(CancelTest, WaitingPlansBeyondThePlanTaskLimitRefuseJobsUntilOneLeaves) {
  absl::StatusOr<std::unique_ptr<compiler::CompiledJob>> compiled =
      AdmitJob(SlowJob(1, 0), compiler::DeviceSet::Cpus(2, 1));
  ASSERT_TRUE(compiled.ok()) << compiled.status();
  const int tasks = (*compiled)->result.plan.tasks_size();
  DaemonOptions options = TestOptions();
  options.max_plan_tasks = 2 * tasks;  // the plans of two waiting jobs
  StartDaemon(options);
  ExpectAThirdWaitingJobRefusedUntilOneLeaves(
      {absl::StrCat("job 'slow' (", tasks, " tasks) cannot be queued: the 2 jobs waiting to run ",
                    "hold plans of ", 2 * tasks, " tasks"),
       "--max-plan-tasks"});
}

TEST_F(CancelTest, CancelsAPendingAndARunningJob) {
  // 10000 steps of 2 ms: far longer than the test.
  const std::string running = SubmitOrDie(SlowJob(10000, 2000));
  const std::string pending = SubmitOrDie(SlowJob(10000, 2000));
  ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(pending, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_PENDING);
  EXPECT_EQ(info.queue_position(), 0);

  ASSERT_TRUE(Cancel(*jobs_, pending, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_EQ(info.error().code(), static_cast<int>(grpc::StatusCode::CANCELLED));
  EXPECT_THAT(info.error().message(), HasSubstr("the test is done with it"));
  // It never ran.
  EXPECT_THAT(StatesOf(WatchToEnd(pending)),
              ElementsAre(v1::JOB_STATE_PENDING, v1::JOB_STATE_CANCELLED));

  // Let the running job report a step or two, then cancel it: the call returns once it ended.
  absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline && GetJob(running, &info).ok() && info.steps_done() < 2) {
  }
  EXPECT_GE(info.steps_done(), 2);
  ASSERT_TRUE(Cancel(*jobs_, running, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(info.error().message(), HasSubstr("the test is done with it"));
  std::vector<v1::JobEvent> events = WatchToEnd(running);
  EXPECT_THAT(StatesOf(events), ElementsAre(v1::JOB_STATE_PENDING, v1::JOB_STATE_LAUNCHING,
                                            v1::JOB_STATE_RUNNING, v1::JOB_STATE_CANCELLED));
  EXPECT_GE(StepsOf(events).size(), 2u);

  // Cancelling again succeeds; a finished job cannot be cancelled.
  ASSERT_TRUE(Cancel(*jobs_, running, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);

  // The daemon takes the next job.
  const std::string next = SubmitOrDie(TrainingJob(2));
  EXPECT_EQ(StatesOf(WatchToEnd(next)).back(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(Cancel(*jobs_, next, &info).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
}

// Issue 56, finding 3: a sleep of 10^12 us (11.6 days), cancelled, left the node agent waiting
// for it for good, and every later job failed to launch.
TEST_F(CancelTest, ACancelledEndlessSleepIsFollowedByASuccessfulJobWithinAMinute) {
  const std::string endless = SubmitOrDie(SlowJob(1, int64_t{1'000'000'000'000}));
  ASSERT_TRUE(WaitForState(endless, v1::JOB_STATE_RUNNING));
  const absl::Time cancelled = absl::Now();
  v1::JobInfo info;
  ASSERT_TRUE(Cancel(*jobs_, endless, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_CANCELLED);
  const std::string next = SubmitOrDie(TrainingJob(2));
  EXPECT_EQ(StatesOf(WatchToEnd(next)).back(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_LT(absl::Now() - cancelled, absl::Minutes(1));
}

TEST_F(CancelTest, AWatcherOfARunningJobSeesItCancelled) {
  const std::string id = SubmitOrDie(SlowJob(10000, 2000));
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_RUNNING));
  std::vector<v1::JobEvent> events;
  std::thread watcher([&] { events = WatchToEnd(id); });
  absl::SleepFor(absl::Milliseconds(50));
  v1::JobInfo info;
  ASSERT_TRUE(Cancel(*jobs_, id, &info).ok());
  watcher.join();
  EXPECT_EQ(StatesOf(events).back(), v1::JOB_STATE_CANCELLED);
}

TEST_F(CancelTest, ShutdownCancelsPendingAndRunningJobs) {
  const std::string running = SubmitOrDie(SlowJob(10000, 2000));
  const std::string pending = SubmitOrDie(SlowJob(10000, 2000));
  ASSERT_TRUE(WaitForState(running, v1::JOB_STATE_RUNNING));
  std::vector<v1::JobEvent> events;
  std::thread watcher([&] { events = WatchToEnd(running); });
  absl::SleepFor(absl::Milliseconds(50));

  const absl::Time start = absl::Now();
  daemon_->Shutdown(absl::Milliseconds(100));
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  watcher.join();
  EXPECT_EQ(StatesOf(events).back(), v1::JOB_STATE_CANCELLED);
  absl::StatusOr<v1::JobInfo> info = daemon_->jobs()->Get(pending);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::JOB_STATE_CANCELLED);
  EXPECT_THAT(info->error().message(), HasSubstr("shut down"));
  // New jobs are refused.
  EXPECT_EQ(daemon_->jobs()->Submit(TrainingJob(1)).status().code(),
            absl::StatusCode::kUnavailable);
}

TEST_F(CancelTest, ShutdownLetsTheRunningJobFinishWithinTheGrace) {
  // 100 steps of 2 ms.
  const std::string id = SubmitOrDie(SlowJob(100, 2000));
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_RUNNING));
  daemon_->Shutdown(absl::Seconds(20));
  absl::StatusOr<v1::JobInfo> info = daemon_->jobs()->Get(id);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->state(), v1::JOB_STATE_SUCCEEDED);
}

}  // namespace
}  // namespace loom::daemon::testing
