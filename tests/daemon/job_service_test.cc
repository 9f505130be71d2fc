// loom.v1.JobService and ClusterService through a real gRPC client: submit, watch, get, list,
// plans, and the status codes of bad requests.
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "google/protobuf/util/time_util.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"
#include "tests/test_directory.h"

namespace loom::daemon::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::SizeIs;

using JobServiceTest = DaemonTest;

TEST_F(JobServiceTest, TrainsAJobToSucceededWithOneStepEventPerStep) {
  v1::SubmitJobResponse submitted;
  grpc::Status status = Submit(TrainingJob(5), &submitted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  const std::string id = submitted.job().job_id();
  EXPECT_EQ(id, "job-1");
  EXPECT_EQ(submitted.job().name(), "mlp_regression");
  EXPECT_EQ(submitted.job().num_steps(), 5);
  EXPECT_TRUE(submitted.job().training());
  EXPECT_THAT(submitted.job().devices(), ElementsAre("node0/cpu:0", "node0/cpu:1"));

  grpc::Status watch_status;
  std::vector<v1::JobEvent> events = WatchToEnd(id, absl::Seconds(30), &watch_status);
  EXPECT_TRUE(watch_status.ok()) << watch_status.error_message();
  EXPECT_THAT(StatesOf(events), ElementsAre(v1::JOB_STATE_PENDING, v1::JOB_STATE_LAUNCHING,
                                            v1::JOB_STATE_RUNNING, v1::JOB_STATE_SUCCEEDED));
  std::vector<v1::StepEvent> steps = StepsOf(events);
  ASSERT_THAT(steps, SizeIs(5));
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(steps[i].step(), i + 1);
    EXPECT_EQ(steps[i].num_steps(), 5);
    EXPECT_GT(steps[i].loss(), 0);
    EXPECT_GE(steps[i].step_time_seconds(), 0);
    EXPECT_FALSE(steps[i].has_tokens_per_second());  // the job reads no token file
    EXPECT_THAT(steps[i].scalars(), IsEmpty());      // nor fetches another scalar
  }
  // SGD on a fixed-size regression: the loss goes down.
  EXPECT_LT(steps.back().loss(), steps.front().loss());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i].sequence(), static_cast<int64_t>(i));
    EXPECT_EQ(events[i].job_id(), id);
  }

  v1::JobInfo info;
  ASSERT_TRUE(GetJob(id, &info).ok());
  EXPECT_EQ(info.state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(info.steps_done(), 5);
  EXPECT_DOUBLE_EQ(info.last_loss(), steps.back().loss());
  EXPECT_TRUE(info.has_start_time());
  EXPECT_TRUE(info.has_end_time());
  EXPECT_FALSE(info.has_error());

  // A late watcher gets the whole story again (from the finished job's packed events), and the
  // stream ends.
  std::vector<v1::JobEvent> replay = WatchToEnd(id);
  ASSERT_EQ(replay.size(), events.size());
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(replay[i], events[i])) << i;
  }
}

TEST_F(JobServiceTest, StepEventsCarryTheJobsOtherScalarFetches) {
  // "ones_total" is a scalar (16 per micro-batch, the mean of a step's two); "ones_per_column" is
  // not.
  const job::Job job = CountingJob(3, "ones_total", "ones_per_column");
  const std::string id = SubmitOrDie(job);
  std::vector<v1::StepEvent> steps = StepsOf(WatchToEnd(id));
  ASSERT_THAT(steps, SizeIs(3));
  for (const v1::StepEvent& step : steps) {
    ASSERT_THAT(step.scalars(), SizeIs(1)) << step.DebugString();
    EXPECT_EQ(step.scalars(0).tensor(), "ones_total");
    EXPECT_EQ(step.scalars(0).value(), 16);
  }
}

TEST_F(JobServiceTest, AFetchingJobsMemoryDoesNotGrowWithItsSteps) {
  // The sinks on a node keep no pieces (no client could get them): 40 steps fetch 320 KiB per
  // device, more than the budget, which a step's registers fit many times over.
  DaemonOptions options = TestOptions();
  options.memory_budget_per_device_bytes = 256 << 10;
  StartDaemon(options);
  const std::string id = SubmitOrDie(FetchingJob(40));
  std::vector<v1::JobEvent> events = WatchToEnd(id, absl::Seconds(60));
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED)
      << events.back().DebugString();
  EXPECT_THAT(StepsOf(events), SizeIs(40));
}

TEST_F(JobServiceTest, RunsJobsOneAtATimeInSubmissionOrder) {
  const std::string first = SubmitOrDie(TrainingJob(3));
  const std::string second = SubmitOrDie(TrainingJob(3));
  std::vector<v1::JobEvent> second_events = WatchToEnd(second);
  EXPECT_EQ(StatesOf(second_events).back(), v1::JOB_STATE_SUCCEEDED);
  v1::JobInfo first_info;
  v1::JobInfo second_info;
  ASSERT_TRUE(GetJob(first, &first_info).ok());
  ASSERT_TRUE(GetJob(second, &second_info).ok());
  EXPECT_EQ(first_info.state(), v1::JOB_STATE_SUCCEEDED);
  // The second started only once the first had ended.
  EXPECT_GE(google::protobuf::util::TimeUtil::TimestampToNanoseconds(second_info.start_time()),
            google::protobuf::util::TimeUtil::TimestampToNanoseconds(first_info.end_time()));

  v1::ListJobsRequest request;
  v1::ListJobsResponse response;
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), request, &response).ok());
  ASSERT_THAT(response.jobs(), SizeIs(2));
  EXPECT_EQ(response.jobs(0).job_id(), first);
  EXPECT_EQ(response.jobs(1).job_id(), second);

  request.add_states(v1::JOB_STATE_RUNNING);
  response.Clear();
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), request, &response).ok());
  EXPECT_THAT(response.jobs(), SizeIs(0));
}

TEST_F(JobServiceTest, ListJobsPagesFromTheOldest) {
  // A long first job keeps the others pending (cancelled at the end by TearDown's shutdown).
  std::vector<std::string> ids = {SubmitOrDie(SlowJob(1000, 10000))};
  for (int i = 0; i < 4; ++i) ids.push_back(SubmitOrDie(TrainingJob(1)));

  v1::ListJobsRequest request;
  request.set_page_size(2);
  std::vector<std::vector<std::string>> pages;
  do {
    v1::ListJobsResponse response;
    grpc::Status status = jobs_->ListJobs(ContextWithDeadline().get(), request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<std::string>& page = pages.emplace_back();
    for (const v1::JobInfo& job : response.jobs()) page.push_back(job.job_id());
    request.set_page_token(response.next_page_token());
  } while (!request.page_token().empty() && pages.size() < 10);
  EXPECT_THAT(pages, ElementsAre(ElementsAre(ids[0], ids[1]), ElementsAre(ids[2], ids[3]),
                                 ElementsAre(ids[4])));

  // Pages of the pending jobs only: the filter applies before the page is cut.
  request.Clear();
  request.add_states(v1::JOB_STATE_PENDING);
  request.set_page_size(3);
  v1::ListJobsResponse response;
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), request, &response).ok());
  ASSERT_THAT(response.jobs(), SizeIs(3));
  EXPECT_EQ(response.jobs(0).job_id(), ids[1]);
  request.set_page_token(response.next_page_token());
  response.Clear();
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), request, &response).ok());
  ASSERT_THAT(response.jobs(), SizeIs(1));
  EXPECT_EQ(response.jobs(0).job_id(), ids[4]);
  EXPECT_EQ(response.next_page_token(), "");

  // Bad paging is INVALID_ARGUMENT naming the field.
  request.set_page_token("page-2");
  grpc::Status status = jobs_->ListJobs(ContextWithDeadline().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_token 'page-2'"));
  request.clear_page_token();
  request.set_page_size(-1);
  status = jobs_->ListJobs(ContextWithDeadline().get(), request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("page_size"));
}

TEST_F(JobServiceTest, ABadJobIsInvalidArgumentNamingTheOp) {
  job::Job job = TrainingJob(2);
  job::Op* op = job.add_ops();
  op->set_name("mystery");
  op->set_type("no_such_op");
  op->add_inputs("x");
  op->add_outputs("z");
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(job, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("mystery"));

  // Nothing was queued.
  v1::ListJobsResponse jobs;
  ASSERT_TRUE(jobs_->ListJobs(ContextWithDeadline().get(), {}, &jobs).ok());
  EXPECT_THAT(jobs.jobs(), SizeIs(0));
}

TEST_F(JobServiceTest, ARequestWithoutAJobIsInvalidArgument) {
  v1::SubmitJobResponse response;
  grpc::Status status =
      jobs_->SubmitJob(ContextWithDeadline().get(), v1::SubmitJobRequest(), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, AJobLargerThanTheClusterIsResourceExhausted) {
  job::Job job = TrainingJob(2);
  job.mutable_placement()->clear_devices();
  for (int device = 0; device < 4; ++device) {
    job.mutable_placement()->add_devices("cpu:" + std::to_string(device));
  }
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(job, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("needs 4 devices"));
  EXPECT_THAT(status.error_message(), HasSubstr("cpu:2"));

  // Another node's device: also more than this cluster has.
  job::Job other_node = TrainingJob(2);
  (*other_node.mutable_ops())[0].mutable_placement()->add_devices("node1/cpu:0");
  status = Submit(other_node, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("op 'h' is placed on node1/cpu:0"));
}

TEST_F(JobServiceTest, AJobOnADeviceTheClusterLacksSaysWhichDeviceNotThatItIsTooLarge) {
  // Two devices, as many as the cluster has, but cpu:3 is not one of them (node 0 has cpu:0 and
  // cpu:1): "needs 2 devices but the cluster has 2" would contradict itself.
  job::Job job = TrainingJob(2);
  job.mutable_placement()->clear_devices();
  job.mutable_placement()->add_devices("cpu:0");
  job.mutable_placement()->add_devices("cpu:3");
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(job, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(),
              HasSubstr("is placed on a device the cluster does not have: the job (its default "
                        "placement) is placed on cpu:3 (node0/cpu:3: a device named without "
                        "'nodeK/' is node 0's). The cluster's 2 devices are node0/cpu:0, "
                        "node0/cpu:1"));
  EXPECT_THAT(status.error_message(), Not(HasSubstr("needs")));
}

TEST_F(JobServiceTest, AJobOverTheMemoryBudgetIsResourceExhausted) {
  DaemonOptions options = TestOptions();
  options.memory_budget_per_device_bytes = 256;
  StartDaemon(options);
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(TrainingJob(2), &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("cpu:"));
}

// Offloaded activations go to host memory, outside the devices' budgets but within the node's
// --host-memory-budget: a client cannot make the daemon allocate more host memory than that.
TEST_F(JobServiceTest, OffloadBeyondTheHostMemoryBudgetIsResourceExhausted) {
  DaemonOptions options = TestOptions();
  options.host_memory_budget_bytes = 256;
  StartDaemon(options);
  v1::ListNodesResponse nodes;
  ASSERT_TRUE(
      cluster_->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &nodes).ok());
  ASSERT_THAT(nodes.nodes(), SizeIs(1));
  EXPECT_EQ(nodes.nodes(0).host_memory_budget_bytes(), 256);
  job::Job offloaded = TrainingJob(2);
  offloaded.set_offload_activations(job::OFFLOAD_ALL);
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(offloaded, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("node 0's host memory needs"));
  // Without offload the same job runs.
  const std::string id = SubmitOrDie(TrainingJob(2));
  std::vector<v1::JobEvent> events = WatchToEnd(id);
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(JobServiceTest, EachNodesDevicesHaveTheirOwnMemoryBudget) {
  DaemonOptions worker_options = TestOptions();
  worker_options.node_name = "small-worker";
  worker_options.coordinator_address = daemon_->address();
  worker_options.memory_budget_per_device_bytes = 256;
  absl::StatusOr<std::unique_ptr<Daemon>> worker = Daemon::Start(worker_options);
  ASSERT_TRUE(worker.ok()) << worker.status();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  v1::ListNodesResponse nodes;
  while (absl::Now() < deadline) {
    nodes.Clear();
    ASSERT_TRUE(
        cluster_->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &nodes).ok());
    if (nodes.nodes_size() == 2 && nodes.nodes(1).state() == v1::NODE_STATE_READY) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_THAT(nodes.nodes(), SizeIs(2));
  ASSERT_THAT(nodes.nodes(1).devices(), SizeIs(2));
  EXPECT_EQ(nodes.nodes(1).devices(0).memory_budget_bytes(), 256);

  // The coordinator's devices (their budget: a share of this host's memory) take the job...
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(TrainingJob(1), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  // ... the worker's refuse it, naming a device of the worker.
  job::Job on_worker = TrainingJob(1);
  on_worker.mutable_placement()->clear_devices();
  on_worker.mutable_placement()->add_devices("node1/cpu:0");
  on_worker.mutable_placement()->add_devices("node1/cpu:1");
  status = Submit(on_worker, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("node1/cpu:"));
  EXPECT_THAT(status.error_message(), HasSubstr("its budget is 256 B"));
  (*worker)->Shutdown(absl::ZeroDuration());
}

TEST_F(JobServiceTest, ACheckpointPathIsCheckedAtSubmit) {
  const std::string directory = ::testing::TempDir();
  auto submit = [&](const job::Job& job, const std::string& path) {
    v1::SubmitJobResponse response;
    return Submit(job, &response, path);
  };
  grpc::Status status = submit(TrainingJob(1), "relative.safetensors");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("'relative.safetensors' is not absolute"));

  status = submit(TrainingJob(1), absl::StrCat(directory, "/authorized_keys"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("must end in .safetensors"));

  status = submit(TrainingJob(1), absl::StrCat(directory, "/no/such/dir/x.safetensors"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("does not exist on the coordinator"));

  // A job without variables has nothing to save.
  job::Job no_variables = ParseJob(R"pb(name: "stateless"
                                        placement { devices: "cpu:0" }
                                        inputs {
                                          name: "x"
                                          shape: [ 4 ]
                                          random_normal { std: 1 }
                                        }
                                        ops { name: "r" type: "relu" inputs: "x" outputs: "y" }
                                        fetch: "y")pb");
  status = submit(no_variables, absl::StrCat(directory, "/stateless.safetensors"));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("job 'stateless' has no variables"));
}

TEST_F(JobServiceTest, ACheckpointIntervalIsCheckedAtSubmit) {
  auto submit = [&](const std::string& path, int64_t every) {
    v1::SubmitJobResponse response;
    return Submit(TrainingJob(1), &response, path, every);
  };
  grpc::Status status = submit("", 2);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("checkpoint_every_steps needs a checkpoint_path"));
  status = submit(absl::StrCat(::testing::TempDir(), "/every.safetensors"), -1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(status.error_message(), HasSubstr("checkpoint_every_steps is -1"));
}

TEST_F(JobServiceTest, AJobSavingEveryFewStepsReportsEachCheckpointAndLeavesNoParts) {
  const std::filesystem::path directory = loom::testing::FreshTestDirectory("periodic");
  std::filesystem::create_directories(directory);
  const std::string path = (directory / "model.safetensors").string();
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(TrainingJob(5), &response, path, 2);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.job().checkpoint_every_steps(), 2);
  std::vector<v1::JobEvent> events = WatchToEnd(response.job().job_id());
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_SUCCEEDED);
  // The one at the end comes right before SUCCEEDED; those while it ran (after step 2 and 4,
  // unless a newer one or the end overtook them) before it, in order.
  const v1::JobEvent& last = events[events.size() - 2];
  ASSERT_TRUE(last.has_checkpoint());
  EXPECT_EQ(last.checkpoint().step(), 5);
  EXPECT_EQ(last.checkpoint().path(), path);
  std::vector<int64_t> steps;
  for (const v1::JobEvent& event : events) {
    if (event.has_checkpoint()) steps.push_back(event.checkpoint().step());
  }
  EXPECT_THAT(steps, ::testing::AnyOf(::testing::ElementsAre(2, 4, 5), ::testing::ElementsAre(2, 5),
                                      ::testing::ElementsAre(4, 5), ::testing::ElementsAre(5)));
  v1::JobInfo info;
  ASSERT_TRUE(GetJob(response.job().job_id(), &info).ok());
  EXPECT_EQ(info.checkpoint_step(), 5);
  // Only the checkpoint is left (the node removes its parts once the job is released).
  std::vector<std::string> files;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(20))) {
    files.clear();
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
      files.push_back(entry.path().filename().string());
    }
    if (files.size() == 1) break;
  }
  EXPECT_THAT(files, ElementsAre("model.safetensors"));
}

TEST_F(JobServiceTest, APeriodicCheckpointThatCannotBeWrittenFailsTheJobNamingTheStep) {
  const std::filesystem::path directory = loom::testing::FreshTestDirectory("periodic-fails");
  const std::string path = (directory / "model.safetensors").string();
  // Node 0's part after step 2 cannot be written: a directory is in its way.
  std::filesystem::create_directories(absl::StrCat(path, ".step-2.node-0"));
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(TrainingJob(3), &response, path, 2);
  ASSERT_TRUE(status.ok()) << status.error_message();
  std::vector<v1::JobEvent> events = WatchToEnd(response.job().job_id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(events.back().state_change().error().message(),
              HasSubstr("the checkpoint after step 2: node 0 writing its checkpoint part"));
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST_F(JobServiceTest, AJobWhoseCheckpointCannotBeWrittenFailsSayingWhy) {
  // A directory at the path is refused at submit.
  const std::string directory = absl::StrCat(::testing::TempDir(), "/a_directory.safetensors");
  std::filesystem::create_directories(directory);
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(TrainingJob(2), &response, directory);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("is a directory"));

  // A file that appears at the path while the job runs is not the job's to replace: the job
  // fails naming it, and the file is left as it was.
  const std::string path = absl::StrCat(::testing::TempDir(), "/appears_meanwhile.safetensors");
  std::filesystem::remove(path);
  status = Submit(TrainingJob(200), &response, path);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.job().checkpoint_path(), path);
  {
    std::ofstream someone_elses(path);
    someone_elses << "not the job's";
  }
  std::vector<v1::JobEvent> events = WatchToEnd(response.job().job_id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_FAILED);
  EXPECT_THAT(events.back().state_change().error().message(),
              HasSubstr(absl::StrCat("saving the checkpoint '", path, "'")));
  EXPECT_FALSE(std::filesystem::exists(absl::StrCat(path, ".node-0")));  // the part is gone
  std::ifstream kept(path);
  std::string contents((std::istreambuf_iterator<char>(kept)), std::istreambuf_iterator<char>());
  EXPECT_EQ(contents, "not the job's");
}

TEST_F(JobServiceTest, WatchesBeyondTheLimitAreRefusedUntilOneCloses) {
  DaemonOptions options = TestOptions();
  options.max_watches = 2;
  StartDaemon(options);
  // 10000 steps of 2 ms: far longer than the test.
  const std::string id = SubmitOrDie(SlowJob(10000, 2000));
  v1::WatchJobRequest request;
  request.set_job_id(id);
  // Two watches open (each has received an event, so its handler runs).
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReader<v1::JobEvent>>> watches;
  for (int index = 0; index < 2; ++index) {
    contexts.push_back(ContextWithDeadline(absl::Seconds(30)));
    watches.push_back(jobs_->WatchJob(contexts.back().get(), request));
    v1::JobEvent event;
    ASSERT_TRUE(watches.back()->Read(&event));
  }
  grpc::Status refused;
  EXPECT_THAT(WatchToEnd(id, absl::Seconds(10), &refused), SizeIs(0));
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("2 WatchJob streams are open"));
  EXPECT_THAT(refused.error_message(), HasSubstr("--max-watches"));
  // One closes: a new watch gets the job's events.
  contexts[0]->TryCancel();
  (void)watches[0]->Finish();
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  bool watched = false;
  while (!watched && absl::Now() < deadline) {
    auto context = ContextWithDeadline(absl::Seconds(10));
    std::unique_ptr<grpc::ClientReader<v1::JobEvent>> watch =
        jobs_->WatchJob(context.get(), request);
    v1::JobEvent event;
    watched = watch->Read(&event);
    context->TryCancel();
    (void)watch->Finish();
  }
  EXPECT_TRUE(watched);
  contexts[1]->TryCancel();
  (void)watches[1]->Finish();
}

TEST_F(JobServiceTest, UnknownIdsAreNotFound) {
  v1::JobInfo info;
  EXPECT_EQ(GetJob("job-42", &info).error_code(), grpc::StatusCode::NOT_FOUND);

  v1::CancelJobRequest cancel;
  cancel.set_job_id("job-42");
  v1::CancelJobResponse cancelled;
  EXPECT_EQ(jobs_->CancelJob(ContextWithDeadline().get(), cancel, &cancelled).error_code(),
            grpc::StatusCode::NOT_FOUND);

  v1::GetPlanRequest plan;
  plan.set_job_id("job-42");
  v1::GetPlanResponse plan_response;
  EXPECT_EQ(jobs_->GetPlan(ContextWithDeadline().get(), plan, &plan_response).error_code(),
            grpc::StatusCode::NOT_FOUND);

  v1::GetTraceRequest trace;
  trace.set_job_id("job-42");
  v1::GetTraceResponse trace_response;
  EXPECT_EQ(jobs_->GetTrace(ContextWithDeadline().get(), trace, &trace_response).error_code(),
            grpc::StatusCode::NOT_FOUND);

  grpc::Status watch;
  EXPECT_THAT(WatchToEnd("job-42", absl::Seconds(5), &watch), SizeIs(0));
  EXPECT_EQ(watch.error_code(), grpc::StatusCode::NOT_FOUND);

  EXPECT_EQ(GetJob("", &info).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(JobServiceTest, GetPlanReturnsTheCompiledPlan) {
  const std::string id = SubmitOrDie(TrainingJob(2));
  v1::GetPlanRequest request;
  request.set_job_id(id);
  v1::GetPlanResponse response;
  grpc::Status status = jobs_->GetPlan(ContextWithDeadline().get(), request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.plan().job_name(), "mlp_regression");
  EXPECT_GT(response.plan().tasks_size(), 0);
  EXPECT_THAT(response.node_plans(), SizeIs(1));
  WatchToEnd(id);
  // Once the job ended the coordinator keeps the plan only serialized: the same plan.
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  v1::GetPlanResponse after;
  status = jobs_->GetPlan(ContextWithDeadline().get(), request, &after);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(after, response));

  // And of a job cancelled while it waited.
  const std::string running = SubmitOrDie(SlowJob(1000, 10000));
  const std::string pending = SubmitOrDie(TrainingJob(2));
  v1::CancelJobRequest cancel;
  v1::CancelJobResponse cancelled;
  for (const std::string& job : {pending, running}) {
    cancel.set_job_id(job);
    ASSERT_TRUE(jobs_->CancelJob(ContextWithDeadline().get(), cancel, &cancelled).ok());
  }
  request.set_job_id(pending);
  status = jobs_->GetPlan(ContextWithDeadline().get(), request, &after);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(after, response));
}

TEST_F(JobServiceTest, OneNodesPlanComesAloneAndPlansLargerThanAMessageSaySo) {
  // Long names: a plan of tens of KiB, far more than a response's few dozen bytes besides it.
  const job::Job job = ReluChain(50, "cpu:0", 200);
  const std::string id = SubmitOrDie(job);
  WatchToEnd(id);
  v1::GetPlanRequest request;
  request.set_job_id(id);
  v1::GetPlanResponse whole;
  ASSERT_TRUE(jobs_->GetPlan(ContextWithDeadline().get(), request, &whole).ok());
  ASSERT_EQ(whole.node_plans_size(), 1);
  request.set_node(0);
  v1::GetPlanResponse node_only;
  ASSERT_TRUE(jobs_->GetPlan(ContextWithDeadline().get(), request, &node_only).ok());
  ASSERT_EQ(node_only.node_plans_size(), 1);
  EXPECT_EQ(node_only.plan().tasks_size(), 0);
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(node_only.node_plans(0),
                                                                 whole.node_plans(0)));
  request.set_node(1);
  grpc::Status missing = jobs_->GetPlan(ContextWithDeadline().get(), request, &node_only);
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(missing.error_message(), HasSubstr("has no node 1: its plan spans 1 node"));

  // A message limit between the node's plan and the whole response (about twice as large): the
  // whole is refused saying to ask for one node's, which comes.
  DaemonOptions options = TestOptions();
  const int64_t node_bytes = static_cast<int64_t>(whole.node_plans(0).ByteSizeLong());
  options.max_message_bytes = static_cast<int>(node_bytes * 3 / 2) + (4 << 10);
  ASSERT_GT(static_cast<int64_t>(whole.ByteSizeLong()), options.max_message_bytes);
  StartDaemon(options);
  const std::string again = SubmitOrDie(job);
  request.set_job_id(again);
  request.clear_node();
  v1::GetPlanResponse refused;
  grpc::Status status = jobs_->GetPlan(ContextWithDeadline().get(), request, &refused);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(status.error_message(), HasSubstr("more than fits in a message"));
  EXPECT_THAT(status.error_message(), HasSubstr("loomctl plan JOB --node N"));
  request.set_node(0);
  ASSERT_TRUE(jobs_->GetPlan(ContextWithDeadline().get(), request, &node_only).ok());
  EXPECT_EQ(node_only.node_plans(0).tasks_size(), whole.node_plans(0).tasks_size());
}

TEST_F(JobServiceTest, GetTraceIsTheTraceOfATracedJobOnceItEnded) {
  v1::SubmitJobRequest request;
  *request.mutable_job() = SlowJob(3, 200000);
  request.set_trace(true);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(jobs_->SubmitJob(ContextWithDeadline().get(), request, &submitted).ok());
  const std::string id = submitted.job().job_id();
  EXPECT_TRUE(submitted.job().traced());
  v1::GetTraceRequest trace_request;
  trace_request.set_job_id(id);
  v1::GetTraceResponse trace;
  // Not before it ended.
  grpc::Status early = jobs_->GetTrace(ContextWithDeadline().get(), trace_request, &trace);
  EXPECT_EQ(early.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(early.error_message(), HasSubstr("once it ends"));
  WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  grpc::Status status = jobs_->GetTrace(ContextWithDeadline().get(), trace_request, &trace);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(trace.acts(), 0);
  // One complete event per act, on both devices.
  const std::string& json = trace.chrome_trace_json();
  EXPECT_EQ(CompleteEvents(json), trace.acts());
  EXPECT_THAT(json, HasSubstr("\"name\":\"node0/cpu:1\""));

  // A job without trace: FAILED_PRECONDITION, saying how to get one.
  const std::string plain = SubmitOrDie(TrainingJob(1));
  WatchToEnd(plain);
  trace_request.set_job_id(plain);
  grpc::Status refused = jobs_->GetTrace(ContextWithDeadline().get(), trace_request, &trace);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_THAT(refused.error_message(), HasSubstr("--trace"));
}

// The 1-based step of each act of a Chrome trace (its events' args.step).
std::vector<int64_t> StepsOfActs(const std::string& json) {
  std::vector<int64_t> steps;
  const std::string key = "\"step\":";
  for (size_t at = json.find(key); at != std::string::npos; at = json.find(key, at + 1)) {
    steps.push_back(std::stoll(json.substr(at + key.size(), 20)));
  }
  return steps;
}

TEST_F(JobServiceTest, TraceStepsRecordOnlyTheActsOfThoseSteps) {
  job::Job job = TrainingJob(6);
  job.set_num_micro_batches(2);
  v1::SubmitJobRequest request;
  *request.mutable_job() = job;
  request.set_trace(true);
  request.mutable_trace_steps()->set_first(3);
  request.mutable_trace_steps()->set_last(4);
  v1::SubmitJobResponse submitted;
  grpc::Status status = jobs_->SubmitJob(ContextWithDeadline().get(), request, &submitted);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(submitted.job().trace_steps().first(), 3);
  EXPECT_EQ(submitted.job().trace_steps().last(), 4);
  const std::string windowed = submitted.job().job_id();
  WatchToEnd(windowed);
  ASSERT_TRUE(WaitForState(windowed, v1::JOB_STATE_SUCCEEDED));
  request.clear_trace_steps();
  ASSERT_TRUE(jobs_->SubmitJob(ContextWithDeadline().get(), request, &submitted).ok());
  const std::string whole = submitted.job().job_id();
  WatchToEnd(whole);
  ASSERT_TRUE(WaitForState(whole, v1::JOB_STATE_SUCCEEDED));

  std::map<int64_t, int> acts_of_whole;
  std::map<int64_t, int> acts_of_window;
  for (const auto& [id, acts] : {std::pair{whole, &acts_of_whole}, {windowed, &acts_of_window}}) {
    v1::GetTraceRequest trace_request;
    trace_request.set_job_id(id);
    v1::GetTraceResponse trace;
    status = jobs_->GetTrace(ContextWithDeadline().get(), trace_request, &trace);
    ASSERT_TRUE(status.ok()) << status.error_message();
    std::vector<int64_t> steps = StepsOfActs(trace.chrome_trace_json());
    EXPECT_EQ(steps.size(), static_cast<size_t>(trace.acts()));
    for (int64_t step : steps) ++(*acts)[step];
  }
  EXPECT_THAT(acts_of_whole, SizeIs(6));
  // The window's acts are the whole job's acts of steps 3 and 4.
  EXPECT_THAT(acts_of_window, SizeIs(2));
  EXPECT_GT(acts_of_window[3], 0);
  EXPECT_EQ(acts_of_window[3], acts_of_whole[3]);
  EXPECT_EQ(acts_of_window[4], acts_of_whole[4]);
}

TEST_F(JobServiceTest, TraceStepsOutsideTheJobOrWithoutTraceAreInvalid) {
  struct Case {
    bool trace;
    int64_t first, last;
    const char* says;
  } cases[] = {{false, 1, 1, "without trace"},
               {true, 0, 2, "not a range of the job's steps 1-3"},
               {true, 2, 1, "not a range"},
               {true, 3, 4, "not a range of the job's steps 1-3"}};
  for (const Case& bad : cases) {
    v1::SubmitJobRequest request;
    *request.mutable_job() = TrainingJob(3);
    request.set_trace(bad.trace);
    request.mutable_trace_steps()->set_first(bad.first);
    request.mutable_trace_steps()->set_last(bad.last);
    v1::SubmitJobResponse response;
    grpc::Status status = jobs_->SubmitJob(ContextWithDeadline().get(), request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad.says;
    EXPECT_THAT(status.error_message(), HasSubstr(bad.says));
    EXPECT_THAT(status.error_message(), HasSubstr("mlp_regression"));
  }
}

TEST_F(JobServiceTest, AJobOverThePlanTaskLimitIsRefusedAndSmallerOnesRun) {
  DaemonOptions options = TestOptions();
  options.max_plan_tasks = 40;
  StartDaemon(options);
  v1::SubmitJobResponse response;
  grpc::Status refused = Submit(ReluChain(60, "cpu:0"), &response);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_THAT(refused.error_message(), HasSubstr("lowers to more than 40 tasks"));
  EXPECT_THAT(refused.error_message(), HasSubstr("--max-plan-tasks"));
  const std::string id = SubmitOrDie(ReluChain(10, "cpu:0"));
  WatchToEnd(id);
  EXPECT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
}

TEST_F(JobServiceTest, ATraceLargerThanAMessageComesFromItsNodeInParts) {
  DaemonOptions options = TestOptions();
  options.max_message_bytes = 16 << 10;  // node 0's updates too: up to 16 KiB
  StartDaemon(options);
  v1::SubmitJobRequest request;
  *request.mutable_job() = TrainingJob(20);
  request.set_trace(true);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(jobs_->SubmitJob(ContextWithDeadline().get(), request, &submitted).ok());
  const std::string id = submitted.job().job_id();
  WatchToEnd(id);
  ASSERT_TRUE(WaitForState(id, v1::JOB_STATE_SUCCEEDED));
  absl::StatusOr<v1::GetTraceResponse> trace = TraceThroughClient(id, options.max_message_bytes);
  ASSERT_TRUE(trace.ok()) << trace.status();
  EXPECT_GT(trace->chrome_trace_json().size(), 4u * options.max_message_bytes);
  EXPECT_EQ(CompleteEvents(trace->chrome_trace_json()), trace->acts());
  EXPECT_TRUE(trace->chrome_trace_json().ends_with("\n]}\n"));
}

TEST_F(JobServiceTest, ListNodesDescribesThisNode) {
  v1::ListNodesResponse response;
  grpc::Status status =
      cluster_->ListNodes(ContextWithDeadline().get(), v1::ListNodesRequest(), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_THAT(response.nodes(), SizeIs(1));
  const v1::NodeInfo& node = response.nodes(0);
  EXPECT_EQ(node.name(), "test-node");
  EXPECT_EQ(node.address(), daemon_->address());
  EXPECT_EQ(node.state(), v1::NODE_STATE_READY);
  EXPECT_TRUE(node.coordinator());
  EXPECT_EQ(node.running_job_id(), "");
  ASSERT_THAT(node.devices(), SizeIs(2));
  EXPECT_EQ(node.devices(1).name(), "node0/cpu:1");
  EXPECT_EQ(node.devices(1).type(), "cpu");
  EXPECT_EQ(node.devices(1).index(), 1);
  // --memory-budget-per-device auto: the two devices share 3/4 of this host's memory.
  EXPECT_GT(node.devices(1).memory_budget_bytes(), 0);
  EXPECT_EQ(node.devices(1).memory_budget_bytes(), daemon_->memory_budget().bytes);
}

}  // namespace
}  // namespace loom::daemon::testing
