// Clusters of loomd processes on this machine: a coordinator and two workers (each with two CPU
// devices) run GPT jobs whose devices span the nodes (pipeline, data, tensor parallel and mixed),
// and the step losses equal those of the same job on a one-node loomd bit for bit. A worker killed
// with SIGKILL mid-job fails the job within 10 s with an error naming the node; the survivors run
// the next job that fits. A job's checkpoint assembled from the nodes' parts equals the one-node
// run's, and a job resumed from it goes on as if it had never stopped. A worker's resident memory
// goes back to where it was after every job.
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cluster/loomd_client.h"
#include "tests/cluster/loomd_process.h"
#include "tools/loom-gpt/gpt_model.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

// A field of /proc/PID/status in bytes ("VmRSS:  1234 kB"); -1 when it cannot be read.
int64_t ProcessMemoryBytes(pid_t pid, const std::string& field) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string name;
  int64_t kibibytes;
  while (status >> name) {
    if (name == field + ":" && status >> kibibytes) return kibibytes * 1024;
    status.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return -1;
}

class LoomdClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string directory = ::testing::TempDir();
    auto coordinator =
        LoomdProcess::Start(LOOMD_BINARY,
                            {"--verbose", "--devices", "cpu:2", "--node-name", "node-0",
                             "--heartbeat-interval", "200ms", "--node-timeout", "2s"},
                            absl::StrCat(directory, "/loomd-0.log"));
    ASSERT_TRUE(coordinator.ok()) << coordinator.status();
    daemons_.push_back(*std::move(coordinator));
    for (int rank = 1; rank <= 2; ++rank) {
      auto worker = LoomdProcess::Start(
          LOOMD_BINARY,
          {"--verbose", "--devices", "cpu:2", "--node-name", absl::StrCat("node-", rank),
           "--node-rank", absl::StrCat(rank), "--coordinator", daemons_[0]->address()},
          absl::StrCat(directory, "/loomd-", rank, ".log"));
      ASSERT_TRUE(worker.ok()) << worker.status();
      daemons_.push_back(*std::move(worker));
    }
    client_ = std::make_unique<LoomdClient>(daemons_[0]->address());
    ASSERT_TRUE(client_->WaitForReadyNodes(3, absl::Seconds(20))) << daemons_[0]->Log();
  }

  void TearDown() override {
    if (HasFailure()) {
      for (auto& daemon : daemons_) {
        if (daemon != nullptr) std::cerr << daemon->Log() << "\n";
      }
    }
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
      if (*it != nullptr) (*it)->Signal(SIGTERM);
    }
  }

  // The job's outcome on this cluster.
  JobOutcome Run(const job::Job& job) { return client_->Run(job); }

  // The job's outcome on a one-node loomd with `devices` CPU devices.
  JobOutcome RunOnOneNode(const job::Job& job, int devices, const std::string& checkpoint_path = "",
                          bool stream_fetches = false) {
    auto daemon = LoomdProcess::Start(
        LOOMD_BINARY, {"--devices", absl::StrCat("cpu:", devices), "--node-name", "single"},
        absl::StrCat(::testing::TempDir(), "/loomd-single.log"));
    if (!daemon.ok()) {
      JobOutcome failed;
      failed.error = daemon.status().ToString();
      return failed;
    }
    LoomdClient client((*daemon)->address());
    JobOutcome outcome = client.Run(job, checkpoint_path, stream_fetches);
    (*daemon)->Signal(SIGTERM);
    return outcome;
  }

  void ExpectEqualsOneNodeRun(gpt::GptConfig config, int devices_per_node) {
    const int devices = static_cast<int>(gpt::GptDeviceCount(config));
    absl::StatusOr<job::Job> single = gpt::BuildGptJob(config);
    ASSERT_TRUE(single.ok()) << single.status();
    JobOutcome expected = RunOnOneNode(*single, devices);
    ASSERT_EQ(expected.state, v1::JOB_STATE_SUCCEEDED) << expected.error;
    config.devices_per_node = devices_per_node;
    absl::StatusOr<job::Job> spread = gpt::BuildGptJob(config);
    ASSERT_TRUE(spread.ok()) << spread.status();
    JobOutcome actual = Run(*spread);
    ASSERT_EQ(actual.state, v1::JOB_STATE_SUCCEEDED) << actual.error;
    ASSERT_EQ(actual.losses.size(), static_cast<size_t>(config.steps));
    EXPECT_EQ(actual.losses, expected.losses);
  }

  // The small GPT with DP = 2 x PP = 2 (2 micro-batches), 2 devices per node, AdamW: spread over
  // the nodes, with optimizer state, as resuming must restore it.
  static absl::StatusOr<job::Job> DataAndPipelineParallelGpt(int64_t steps) {
    gpt::GptConfig config = SmallGpt(steps);
    config.data_parallel = 2;
    config.pipeline_stages = 2;
    config.micro_batches = 2;
    config.devices_per_node = 2;
    return gpt::BuildGptJob(config);
  }

  std::vector<std::unique_ptr<LoomdProcess>> daemons_;
  std::unique_ptr<LoomdClient> client_;
};

TEST_F(LoomdClusterTest, ListsEveryNode) {
  std::vector<v1::NodeInfo> nodes = client_->Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  for (int index = 0; index < 3; ++index) {
    EXPECT_EQ(nodes[index].index(), index);
    EXPECT_EQ(nodes[index].name(), absl::StrCat("node-", index));
    EXPECT_EQ(nodes[index].coordinator(), index == 0);
    ASSERT_EQ(nodes[index].devices_size(), 2);
    EXPECT_EQ(nodes[index].devices(1).name(), absl::StrCat("node", index, "/cpu:1"));
  }
}

TEST_F(LoomdClusterTest, PipelineOverThreeNodesEqualsTheOneNodeRun) {
  gpt::GptConfig config = SmallGpt(4);
  config.pipeline_stages = 3;
  config.micro_batches = 3;
  ExpectEqualsOneNodeRun(config, 1);
}

TEST_F(LoomdClusterTest, DataParallelStagesOnTwoNodesEqualTheOneNodeRun) {
  gpt::GptConfig config = SmallGpt(4);
  config.data_parallel = 2;
  config.pipeline_stages = 2;
  config.micro_batches = 2;
  ExpectEqualsOneNodeRun(config, 2);
}

TEST_F(LoomdClusterTest, DataParallelOverThreeNodesEqualsTheOneNodeRun) {
  gpt::GptConfig config = SmallGpt(4);
  config.data_parallel = 3;
  ExpectEqualsOneNodeRun(config, 1);
}

TEST_F(LoomdClusterTest, TensorParallelOverTwoNodesEqualsTheOneNodeRun) {
  gpt::GptConfig config = SmallGpt(4);
  config.tensor_parallel = 2;
  ExpectEqualsOneNodeRun(config, 1);
}

TEST_F(LoomdClusterTest, DataParallelAcrossNodesTimesTensorParallelWithinEqualsTheOneNodeRun) {
  gpt::GptConfig config = SmallGpt(4);
  config.data_parallel = 2;
  config.tensor_parallel = 2;
  ExpectEqualsOneNodeRun(config, 2);
}

TEST_F(LoomdClusterTest, ACheckpointOfAJobAcrossNodesEqualsTheOneNodeRuns) {
  // Data parallel across the two workers, tensor parallel within each: every variable's pieces
  // are split over devices and nodes.
  gpt::GptConfig config = SmallGpt(3);
  config.data_parallel = 2;
  config.tensor_parallel = 2;
  absl::StatusOr<job::Job> single = gpt::BuildGptJob(config);
  ASSERT_TRUE(single.ok()) << single.status();
  const std::string directory = ::testing::TempDir();
  const std::string expected_path = absl::StrCat(directory, "/one_node.safetensors");
  JobOutcome expected = RunOnOneNode(*single, 4, expected_path);
  ASSERT_EQ(expected.state, v1::JOB_STATE_SUCCEEDED) << expected.error;

  config.devices_per_node = 2;
  absl::StatusOr<job::Job> spread = gpt::BuildGptJob(config);
  ASSERT_TRUE(spread.ok()) << spread.status();
  const std::string actual_path = absl::StrCat(directory, "/across_nodes.safetensors");
  JobOutcome actual = client_->Run(*spread, actual_path);
  ASSERT_EQ(actual.state, v1::JOB_STATE_SUCCEEDED) << actual.error;

  absl::StatusOr<checkpoint::Checkpoint> one_node = checkpoint::ReadSafetensors(expected_path);
  ASSERT_TRUE(one_node.ok()) << one_node.status();
  absl::StatusOr<checkpoint::Checkpoint> across = checkpoint::ReadSafetensors(actual_path);
  ASSERT_TRUE(across.ok()) << across.status();
  EXPECT_TRUE(one_node->tensors.contains("h.0.attn.q.weight"));
  EXPECT_TRUE(one_node->tensors.contains("optimizer.exp_avg.h.0.attn.q.weight"));
  ASSERT_EQ(across->tensors.size(), one_node->tensors.size());
  for (const auto& [name, tensor] : one_node->tensors) {
    auto found = across->tensors.find(name);
    ASSERT_NE(found, across->tensors.end()) << name;
    EXPECT_EQ(found->second.shape, tensor.shape) << name;
    EXPECT_TRUE(found->second.bytes == tensor.bytes) << name << " differs";
  }
  // The same metadata, but for the job that wrote each (loomd_job: its id and submit time).
  EXPECT_EQ(across->metadata.erase("loomd_job"), 1u);
  EXPECT_EQ(one_node->metadata.erase("loomd_job"), 1u);
  EXPECT_EQ(across->metadata, one_node->metadata);
  EXPECT_EQ(across->metadata.at("step"), "3");
  // The nodes' parts are gone.
  for (int node = 0; node < 3; ++node) {
    EXPECT_FALSE(std::filesystem::exists(absl::StrCat(actual_path, ".node-", node))) << node;
  }
}

TEST_F(LoomdClusterTest, FetchedTensorsStreamedFromTheNodesEqualTheOneNodeRuns) {
  // DP = 2 x PP = 2 over the two workers: the logits (and the loss) come from the last stage's
  // two data-parallel ranks, one per worker, and the coordinator assembles every piece.
  gpt::GptConfig config = SmallGpt(3);
  config.data_parallel = 2;
  config.pipeline_stages = 2;
  config.micro_batches = 2;
  auto with_logits = [](absl::StatusOr<job::Job> job) {
    if (!job.ok()) return job;
    for (const job::Op& op : job->ops()) {
      if (op.name() == "lm_head") job->add_fetch(op.outputs(0));
    }
    return job;
  };
  absl::StatusOr<job::Job> single = with_logits(gpt::BuildGptJob(config));
  ASSERT_TRUE(single.ok()) << single.status();
  ASSERT_THAT(single->fetch(), ::testing::Contains("loss"));
  ASSERT_EQ(single->fetch_size(), 2);  // the loss and the logits
  JobOutcome expected = RunOnOneNode(*single, 4, "", /*stream_fetches=*/true);
  ASSERT_EQ(expected.state, v1::JOB_STATE_SUCCEEDED) << expected.error;

  config.devices_per_node = 2;
  absl::StatusOr<job::Job> spread = with_logits(gpt::BuildGptJob(config));
  ASSERT_TRUE(spread.ok()) << spread.status();
  JobOutcome actual = client_->Run(*spread, "", /*stream_fetches=*/true);
  ASSERT_EQ(actual.state, v1::JOB_STATE_SUCCEEDED) << actual.error;

  // 3 steps of 2 micro-batches, the logits and the loss.
  ASSERT_EQ(actual.fetched.size(), 12u);
  ASSERT_EQ(expected.fetched.size(), 12u);
  auto key = [](const v1::FetchedTensor& fetched) {
    return std::make_pair(fetched.tensor(), fetched.piece());
  };
  std::map<std::pair<std::string, int64_t>, const v1::FetchedTensor*> by_piece;
  for (const v1::FetchedTensor& fetched : expected.fetched) by_piece[key(fetched)] = &fetched;
  for (const v1::FetchedTensor& fetched : actual.fetched) {
    auto found = by_piece.find(key(fetched));
    ASSERT_NE(found, by_piece.end()) << fetched.tensor() << " piece " << fetched.piece();
    EXPECT_THAT(fetched.shape(), ::testing::ElementsAreArray(found->second->shape()));
    EXPECT_TRUE(fetched.data() == found->second->data())
        << fetched.tensor() << " piece " << fetched.piece() << " differs";
  }
  // The logits of a micro-batch: 6 sequences of 16 positions, whole (both ranks' halves).
  for (const v1::FetchedTensor& fetched : actual.fetched) {
    if (fetched.tensor() == "loss") continue;
    int64_t positions = 1;
    for (int axis = 0; axis + 1 < fetched.shape_size(); ++axis) positions *= fetched.shape(axis);
    EXPECT_EQ(positions, 6 * 16) << fetched.tensor();
  }
}

TEST_F(LoomdClusterTest, AJobResumedFromItsCheckpointGoesOnAsIfUninterrupted) {
  // Pipeline and data parallel across the nodes, AdamW: the checkpoint must hold the optimizer's
  // state and step for the resumed steps to equal the uninterrupted ones.
  absl::StatusOr<job::Job> whole = DataAndPipelineParallelGpt(5);
  ASSERT_TRUE(whole.ok()) << whole.status();
  JobOutcome uninterrupted = Run(*whole);
  ASSERT_EQ(uninterrupted.state, v1::JOB_STATE_SUCCEEDED) << uninterrupted.error;
  ASSERT_EQ(uninterrupted.losses.size(), 5u);

  const std::string path = absl::StrCat(::testing::TempDir(), "/after_3_steps.safetensors");
  job::Job first = *whole;
  first.set_num_steps(3);
  JobOutcome first_part = client_->Run(first, path);
  ASSERT_EQ(first_part.state, v1::JOB_STATE_SUCCEEDED) << first_part.error;

  job::Job rest = *whole;
  rest.set_num_steps(2);
  rest.mutable_initial_state()->set_path(path);
  rest.mutable_initial_state()->set_optimizer_state(true);
  rest.mutable_initial_state()->set_first_step(3);
  JobOutcome resumed = Run(rest);
  ASSERT_EQ(resumed.state, v1::JOB_STATE_SUCCEEDED) << resumed.error;
  EXPECT_EQ(first_part.losses,
            std::vector<double>(uninterrupted.losses.begin(), uninterrupted.losses.begin() + 3));
  EXPECT_EQ(resumed.losses,
            std::vector<double>(uninterrupted.losses.begin() + 3, uninterrupted.losses.end()));
}

TEST_F(LoomdClusterTest, AJobStoppedMidwayResumesFromItsLastPeriodicCheckpoint) {
  // Checkpoints every 2 steps while a DP x PP job with AdamW runs across the nodes; the job is
  // cancelled once the first is saved. Resumed from the last one, the job goes on exactly as the
  // uninterrupted run: every variable's snapshot, on every node, was taken after the same step.
  absl::StatusOr<job::Job> long_job = DataAndPipelineParallelGpt(60);
  ASSERT_TRUE(long_job.ok()) << long_job.status();
  const std::string directory = absl::StrCat(::testing::TempDir(), "/periodic_",
                                             ::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::remove_all(directory);
  std::filesystem::create_directories(directory);
  const std::string path = absl::StrCat(directory, "/model.safetensors");
  absl::StatusOr<std::string> id = client_->Submit(*long_job, path, 2);
  ASSERT_TRUE(id.ok()) << id.status();
  bool cancelled = false;
  JobOutcome stopped = client_->Watch(*id, absl::Minutes(5), [&](const v1::JobEvent& event) {
    if (event.has_checkpoint() && !cancelled) {
      EXPECT_EQ(event.checkpoint().path(), path);
      cancelled = client_->Cancel(*id).ok();
    }
  });
  ASSERT_TRUE(cancelled) << stopped.error;
  ASSERT_EQ(stopped.state, v1::JOB_STATE_CANCELLED) << stopped.error;
  ASSERT_FALSE(stopped.checkpoints.empty());
  const int64_t saved = stopped.checkpoints.back();
  EXPECT_EQ(saved % 2, 0);
  EXPECT_LT(saved, 60);
  EXPECT_EQ(client_->Get(*id).checkpoint_step(), saved);
  absl::StatusOr<checkpoint::Checkpoint> file = checkpoint::ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata.at("step"), absl::StrCat(saved));
  // Every part is removed (the nodes remove theirs once the coordinator released the job).
  std::vector<std::string> left;
  for (absl::Time deadline = absl::Now() + absl::Seconds(10); absl::Now() < deadline;
       absl::SleepFor(absl::Milliseconds(50))) {
    left.clear();
    for (const auto& entry : std::filesystem::directory_iterator(directory)) {
      if (entry.path() != path) left.push_back(entry.path().filename().string());
    }
    if (left.empty()) break;
  }
  EXPECT_THAT(left, ::testing::IsEmpty());

  job::Job whole = *long_job;
  whole.set_num_steps(saved + 3);
  JobOutcome uninterrupted = Run(whole);
  ASSERT_EQ(uninterrupted.state, v1::JOB_STATE_SUCCEEDED) << uninterrupted.error;
  job::Job rest = *long_job;
  rest.set_num_steps(3);
  rest.mutable_initial_state()->set_path(path);
  rest.mutable_initial_state()->set_optimizer_state(true);
  rest.mutable_initial_state()->set_first_step(saved);
  JobOutcome resumed = Run(rest);
  ASSERT_EQ(resumed.state, v1::JOB_STATE_SUCCEEDED) << resumed.error;
  EXPECT_EQ(resumed.losses,
            std::vector<double>(uninterrupted.losses.begin() + saved, uninterrupted.losses.end()));
  // The losses the stopped job reported before its checkpoint are the uninterrupted run's too.
  ASSERT_GE(stopped.losses.size(), static_cast<size_t>(saved));
  EXPECT_EQ(
      std::vector<double>(stopped.losses.begin(), stopped.losses.begin() + saved),
      std::vector<double>(uninterrupted.losses.begin(), uninterrupted.losses.begin() + saved));
}

TEST_F(LoomdClusterTest, ATracedJobsTraceHoldsTheActsOfEveryNode) {
  gpt::GptConfig config = SmallGpt(1);
  config.pipeline_stages = 3;
  config.micro_batches = 3;
  config.devices_per_node = 1;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  auto jobs = v1::JobService::NewStub(client_->channel());
  v1::SubmitJobRequest request;
  *request.mutable_job() = *job;
  request.set_trace(true);
  v1::SubmitJobResponse submitted;
  ASSERT_TRUE(jobs->SubmitJob(LoomdClient::Context().get(), request, &submitted).ok());
  EXPECT_TRUE(submitted.job().traced());
  JobOutcome outcome = client_->Watch(submitted.job().job_id());
  ASSERT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;

  v1::GetTraceRequest trace_request;
  trace_request.set_job_id(submitted.job().job_id());
  v1::GetTraceResponse trace;
  grpc::Status status = jobs->GetTrace(LoomdClient::Context().get(), trace_request, &trace);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_GT(trace.acts(), 0);
  const std::string& json = trace.chrome_trace_json();
  EXPECT_THAT(json, HasSubstr("\"traceEvents\""));
  // Every node's device is a process of its own (pid node * 1000 + 1), named, with acts.
  for (int node = 0; node < 3; ++node) {
    const int pid = node * 1000 + 1;
    EXPECT_THAT(
        json, HasSubstr(absl::StrCat("\"pid\":", pid, ",\"tid\":0,\"args\":{\"name\":\"node", node,
                                     "/cpu:0\"}")));
    EXPECT_THAT(json, HasSubstr(absl::StrCat("\"ph\":\"X\"")));
    EXPECT_NE(json.find(absl::StrCat("\"pid\":", pid, ",\"tid\":1,\"ts\"")), std::string::npos)
        << "no act on node " << node;
  }

  // A job submitted without trace has none.
  absl::StatusOr<std::string> plain = client_->Submit(*job);
  ASSERT_TRUE(plain.ok()) << plain.status();
  ASSERT_EQ(client_->Watch(*plain).state, v1::JOB_STATE_SUCCEEDED);
  trace_request.set_job_id(*plain);
  EXPECT_EQ(jobs->GetTrace(LoomdClient::Context().get(), trace_request, &trace).error_code(),
            grpc::StatusCode::FAILED_PRECONDITION);
}

TEST_F(LoomdClusterTest, AWorkerForwardsJobAndClusterCallsToItsCoordinator) {
  LoomdClient worker(daemons_[1]->address());
  std::vector<v1::NodeInfo> nodes = worker.Nodes();  // the coordinator's list
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_TRUE(nodes[0].coordinator());

  // A job submitted and watched through a worker runs as one submitted to the coordinator.
  absl::StatusOr<job::Job> job = DataAndPipelineParallelGpt(2);
  ASSERT_TRUE(job.ok()) << job.status();
  absl::StatusOr<std::string> id = worker.Submit(*job);
  ASSERT_TRUE(id.ok()) << id.status();
  JobOutcome outcome = worker.Watch(*id);
  EXPECT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;
  EXPECT_EQ(outcome.losses.size(), 2u);
  EXPECT_EQ(client_->Get(*id).state(), v1::JOB_STATE_SUCCEEDED);
  EXPECT_EQ(worker.Get(*id).steps_done(), 2);
  auto jobs = v1::JobService::NewStub(worker.channel());
  v1::ListJobsResponse listed;
  ASSERT_TRUE(jobs->ListJobs(LoomdClient::Context().get(), {}, &listed).ok());
  ASSERT_EQ(listed.jobs_size(), 1);
  EXPECT_EQ(listed.jobs(0).job_id(), *id);
  v1::GetPlanRequest plan_request;
  plan_request.set_job_id(*id);
  v1::GetPlanResponse plan;
  ASSERT_TRUE(jobs->GetPlan(LoomdClient::Context().get(), plan_request, &plan).ok());
  EXPECT_GT(plan.plan().tasks_size(), 0);

  // The coordinator's errors come back as they are.
  v1::GetJobRequest unknown;
  unknown.set_job_id("job-404");
  v1::GetJobResponse got;
  grpc::Status status = jobs->GetJob(LoomdClient::Context().get(), unknown, &got);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  EXPECT_THAT(status.error_message(), HasSubstr("job-404"));

  // Cancelled through another worker, while a third party watches through the first.
  absl::StatusOr<job::Job> long_job = DataAndPipelineParallelGpt(100000);
  ASSERT_TRUE(long_job.ok()) << long_job.status();
  absl::StatusOr<std::string> long_id = worker.Submit(*long_job);
  ASSERT_TRUE(long_id.ok()) << long_id.status();
  LoomdClient other_worker(daemons_[2]->address());
  bool cancelled = false;
  JobOutcome stopped = worker.Watch(*long_id, absl::Minutes(2), [&](const v1::JobEvent& event) {
    if (event.has_step() && !cancelled) cancelled = other_worker.Cancel(*long_id).ok();
  });
  EXPECT_TRUE(cancelled);
  EXPECT_EQ(stopped.state, v1::JOB_STATE_CANCELLED) << stopped.error;
  EXPECT_EQ(client_->Get(*long_id).state(), v1::JOB_STATE_CANCELLED);
}

TEST_F(LoomdClusterTest, AJobLargerThanTheClusterIsResourceExhausted) {
  gpt::GptConfig config = SmallGpt(1);
  config.pipeline_stages = 3;
  config.data_parallel = 4;
  config.devices_per_node = 4;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok());
  EXPECT_EQ(client_->Submit(*job).status().code(), absl::StatusCode::kResourceExhausted);
}

TEST_F(LoomdClusterTest, AWorkerGivesItsMemoryBackAfterEveryJob) {
  // The reference GPT at width 256 with DP = 2 x PP = 2 on nodes 0 and 1: about 200 MB a node.
  gpt::GptConfig config;
  config.width = 256;
  config.steps = 2;
  config.data_parallel = 2;
  config.pipeline_stages = 2;
  config.micro_batches = 2;
  config.devices_per_node = 2;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok()) << job.status();
  const pid_t worker = daemons_[1]->pid();
  const int64_t before = ProcessMemoryBytes(worker, "VmRSS");
  ASSERT_GT(before, 0);
  // The first job's large buffers are mapped one by one and unmapped when freed; the later jobs'
  // come from the allocator's arenas, which keep them unless the daemon gives them back.
  for (int run = 1; run <= 3; ++run) {
    JobOutcome outcome = Run(*job);
    ASSERT_EQ(outcome.state, v1::JOB_STATE_SUCCEEDED) << outcome.error;
    const int64_t peak = ProcessMemoryBytes(worker, "VmHWM");
    ASSERT_GT(peak - before, 64 << 20) << "the job is too small to tell";
    // The nodes are released after the client hears the end: give the worker a moment.
    const int64_t limit = before + (peak - before) / 4;
    int64_t resident = ProcessMemoryBytes(worker, "VmRSS");
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (resident > limit && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(100));
      resident = ProcessMemoryBytes(worker, "VmRSS");
    }
    EXPECT_LE(resident, limit) << "after job " << run << ": resident " << resident
                               << " bytes, before the first job " << before << ", at the peak "
                               << peak;
  }
}

TEST_F(LoomdClusterTest, AKilledWorkerFailsTheJobWithinTenSecondsNamingTheNode) {
  gpt::GptConfig config = SmallGpt(100000);
  config.pipeline_stages = 3;
  config.devices_per_node = 1;
  absl::StatusOr<job::Job> job = gpt::BuildGptJob(config);
  ASSERT_TRUE(job.ok());
  absl::StatusOr<std::string> id = client_->Submit(*job);
  ASSERT_TRUE(id.ok()) << id.status();
  const absl::Time started = absl::Now();
  while (client_->Get(*id).steps_done() < 2 && absl::Now() - started < absl::Seconds(60)) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  ASSERT_GE(client_->Get(*id).steps_done(), 2);
  daemons_[2]->Signal(SIGKILL);
  daemons_[2].reset();
  const absl::Time killed = absl::Now();
  JobOutcome outcome = client_->Watch(*id);
  const absl::Duration to_failure = absl::Now() - killed;
  EXPECT_EQ(outcome.state, v1::JOB_STATE_FAILED);
  EXPECT_THAT(outcome.error, HasSubstr("node 2"));
  EXPECT_LT(to_failure, absl::Seconds(10));

  // The others stay up, see node 2 missing, and run the next job that fits.
  std::vector<v1::NodeInfo> nodes = client_->Nodes();
  ASSERT_EQ(nodes.size(), 3u);
  EXPECT_EQ(nodes[2].state(), v1::NODE_STATE_MISSING);
  gpt::GptConfig smaller = SmallGpt(2);
  smaller.pipeline_stages = 2;
  smaller.devices_per_node = 1;
  absl::StatusOr<job::Job> next = gpt::BuildGptJob(smaller);
  ASSERT_TRUE(next.ok());
  JobOutcome after = Run(*next);
  EXPECT_EQ(after.state, v1::JOB_STATE_SUCCEEDED) << after.error;
  // A job that needs the lost node is refused: FAILED_PRECONDITION.
  EXPECT_EQ(client_->Submit(*job).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace loom::testing
