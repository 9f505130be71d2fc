// The pieces of loomctl's cluster commands that need no daemon: the state file of
// `loomctl cluster up`, the default coordinator, the progress bar, the printing of job events,
// the tables and the exit codes.
#include <filesystem>
#include <fstream>
#include <sstream>

#include "cli/arguments.h"
#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/core/json_test_util.h"
#include "tests/rpc/test_certificates.h"
#include "tools/loomctl/cluster_connection.h"
#include "tools/loomctl/cluster_state.h"
#include "tools/loomctl/cluster_tables.h"
#include "tools/loomctl/job_watch.h"
#include "tools/loomctl/step_reporter.h"

namespace loom::loomctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TemporaryDirectory(const std::string& name) {
  const std::filesystem::path path = std::filesystem::path(::testing::TempDir()) / name;
  std::filesystem::remove_all(path);
  std::filesystem::create_directories(path);
  return path.string();
}

ClusterState TwoNodes() {
  ClusterState state;
  state.coordinator = "127.0.0.1:40001";
  state.loomd = "/opt/loom/bin/loomd";
  for (int rank = 0; rank < 2; ++rank) {
    ClusterNodeRecord node;
    node.rank = rank;
    node.name = "node" + std::to_string(rank);
    node.pid = 4000 + rank;
    node.start_ticks = 123456789012ull + rank;
    node.address = "127.0.0.1:4000" + std::to_string(rank + 1);
    node.log = "/tmp/state/\"quoted\" node" + std::to_string(rank) + ".log";
    node.metrics = "127.0.0.1:" + std::to_string(9400 + rank);
    if (rank == 1) node.cpus = "2-3,8";  // node 0 is not bound
    state.nodes.push_back(node);
  }
  return state;
}

TEST(ClusterStateTest, RoundTripsThroughTheFile) {
  const std::string directory = TemporaryDirectory("cluster_state_round_trip");
  ASSERT_TRUE(WriteClusterState(directory, TwoNodes()).ok());
  absl::StatusOr<ClusterState> read = ReadClusterState(directory);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->coordinator, "127.0.0.1:40001");
  EXPECT_EQ(read->loomd, "/opt/loom/bin/loomd");
  ASSERT_EQ(read->nodes.size(), 2u);
  EXPECT_EQ(read->nodes[1].rank, 1);
  EXPECT_EQ(read->nodes[1].pid, 4001);
  EXPECT_EQ(read->nodes[1].start_ticks, 123456789013ull);
  EXPECT_EQ(read->nodes[1].metrics, "127.0.0.1:9401");
  EXPECT_EQ(read->nodes[1].log, "/tmp/state/\"quoted\" node1.log");
  EXPECT_EQ(read->nodes[0].cpus, "");
  EXPECT_EQ(read->nodes[1].cpus, "2-3,8");
  EXPECT_THAT(ClusterStateToJson(TwoNodes()), HasSubstr("\"cpus\": \"2-3,8\""));
  // The file is strict JSON.
  EXPECT_TRUE(testing::ParseJson(ClusterStateToJson(TwoNodes())).ok());
}

TEST(ClusterStateTest, MissingAndMalformedFiles) {
  const std::string directory = TemporaryDirectory("cluster_state_bad");
  EXPECT_EQ(ReadClusterState(directory).status().code(), absl::StatusCode::kNotFound);
  std::ofstream(ClusterStatePath(directory)) << "{\"coordinator\": 3}";
  absl::StatusOr<ClusterState> read = ReadClusterState(directory);
  EXPECT_EQ(read.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(read.status().message(), HasSubstr(ClusterStatePath(directory)));
  EXPECT_THAT(read.status().message(), HasSubstr("coordinator"));
}

TEST(ClusterConnectionTest, TheDefaultCoordinatorIsTheRecordedOne) {
  const std::string directory = TemporaryDirectory("cluster_default_coordinator");
  cli::ArgumentSpec spec("loomctl test", "test");
  AddClusterFlags(spec);
  absl::StatusOr<cli::ParsedArguments> parsed = spec.Parse({});
  ASSERT_TRUE(parsed.ok());
  auto coordinator = [&] {
    absl::StatusOr<ClusterCommandOptions> options =
        ClusterOptionsFrom("loomctl test", *parsed, directory);
    EXPECT_TRUE(options.ok()) << options.status();
    return options.ok() ? options->coordinator : "";
  };
  EXPECT_EQ(coordinator(), kDefaultCoordinator);
  ASSERT_TRUE(WriteClusterState(directory, TwoNodes()).ok());
  EXPECT_EQ(coordinator(), "127.0.0.1:40001");
}

TEST(ClusterConnectionTest, TheRecordedCoordinatorComesWithItsTlsFiles) {
  const std::string directory = TemporaryDirectory("cluster_recorded_tls");
  const std::string certificates = directory + "/certs";
  ASSERT_TRUE(testing::MakeCertificate(certificates, "local", "127.0.0.1"));
  ClusterState state = TwoNodes();
  state.tls = testing::CertificateFiles(certificates, certificates, "local");
  ASSERT_TRUE(WriteClusterState(directory, state).ok());
  absl::StatusOr<ClusterState> read = ReadClusterState(directory);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->tls.authority_path, state.tls.authority_path);
  EXPECT_EQ(read->tls.certificate_path, state.tls.certificate_path);
  EXPECT_EQ(read->tls.private_key_path, state.tls.private_key_path);

  cli::ArgumentSpec spec("loomctl test", "test");
  AddClusterFlags(spec);
  auto options_for = [&](const std::vector<std::string>& arguments) {
    absl::StatusOr<cli::ParsedArguments> parsed = spec.Parse(arguments);
    EXPECT_TRUE(parsed.ok());
    return ClusterOptionsFrom("loomctl test", *parsed, directory);
  };
  // The recorded coordinator, with the recorded files.
  absl::StatusOr<ClusterCommandOptions> recorded = options_for({});
  ASSERT_TRUE(recorded.ok()) << recorded.status();
  EXPECT_EQ(recorded->coordinator, "127.0.0.1:40001");
  ASSERT_TRUE(recorded->tls.has_value());
  EXPECT_THAT(recorded->tls->certificate, HasSubstr("BEGIN CERTIFICATE"));
  // Another coordinator: nothing recorded applies.
  absl::StatusOr<ClusterCommandOptions> other = options_for({"--coordinator", "10.0.0.1:7070"});
  ASSERT_TRUE(other.ok()) << other.status();
  EXPECT_FALSE(other->tls.has_value());
  // Recorded files that went away: an error naming the state file.
  std::filesystem::remove_all(certificates);
  absl::StatusOr<ClusterCommandOptions> gone = options_for({});
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(gone.status().message(), HasSubstr(ClusterStatePath(directory)));
}

TEST(ClusterConnectionTest, FlagsAndExitCodes) {
  cli::ArgumentSpec spec("loomctl test", "test");
  AddClusterFlags(spec);
  absl::StatusOr<cli::ParsedArguments> parsed =
      spec.Parse({"--coordinator", "10.0.0.1:7070", "--output", "json", "--timeout", "5s"});
  ASSERT_TRUE(parsed.ok());
  absl::StatusOr<ClusterCommandOptions> options = ClusterOptionsFrom("loomctl test", *parsed);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->coordinator, "10.0.0.1:7070");
  EXPECT_EQ(options->output, OutputFormat::kJson);
  EXPECT_EQ(options->timeout, absl::Seconds(5));
  EXPECT_FALSE(options->tls.has_value());
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{
           {"--coordinator", "nowhere"},
           {"--output", "yaml"},
           {"--timeout", "soon"},
           {"--tls-ca", "ca.pem"},
           {"--tls-ca", "/nonexistent/ca.pem", "--tls-cert", "/nonexistent/operator.pem",
            "--tls-key", "/nonexistent/operator.key"}}) {
    absl::StatusOr<cli::ParsedArguments> bad_parsed = spec.Parse(bad);
    ASSERT_TRUE(bad_parsed.ok());
    absl::StatusOr<ClusterCommandOptions> refused = ClusterOptionsFrom("loomctl test", *bad_parsed);
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument) << bad[0];
    EXPECT_THAT(refused.status().message(), HasSubstr(bad[0])) << bad[0];
  }
  EXPECT_EQ(ExitCodeOfRpcError(absl::UnavailableError("x")), cli::kExitUnreachable);
  EXPECT_EQ(ExitCodeOfRpcError(absl::DeadlineExceededError("x")), cli::kExitUnreachable);
  EXPECT_EQ(ExitCodeOfRpcError(absl::NotFoundError("x")), cli::kExitRequestRefused);
  EXPECT_EQ(ExitCodeOfRpcError(absl::InvalidArgumentError("x")), cli::kExitRequestRefused);
}

TEST(StepLinePrinterTest, ProgressBarWithEta) {
  StepLine line;
  line.step = 5;
  line.last_step = 20;
  line.loss = 0.5;
  line.tokens_per_second = 12020;
  const std::string bar = FormatProgressBar(line, 90.0);
  EXPECT_THAT(bar, HasSubstr("5/20 steps"));
  EXPECT_THAT(bar, HasSubstr("loss 0.50000"));
  EXPECT_THAT(bar, HasSubstr("tokens/s 12020"));
  EXPECT_THAT(bar, HasSubstr("ETA 1m30s"));
  EXPECT_THAT(FormatProgressBar(line, std::nullopt), Not(HasSubstr("ETA")));
  EXPECT_EQ(FormatEta(45), "45s");
  EXPECT_EQ(FormatEta(3600 * 3 + 120), "3h02m");

  std::ostringstream out;
  std::ostringstream progress;
  StepLinePrinter printer({/*json=*/false, &out, &progress});
  line.step_time_ms = 2000;
  printer.Print(line);
  printer.PrintOther("job-1: SUCCEEDED");
  printer.ClearProgress();
  EXPECT_EQ(out.str(),
            "step 5/20  loss 0.50000  time 2000.0 ms  tokens/s 12020\njob-1: SUCCEEDED\n");
  // 15 steps left at 2 s each.
  EXPECT_THAT(progress.str(), HasSubstr("ETA 30s"));
  EXPECT_THAT(progress.str(), HasSubstr("\r\033[K"));
}

v1::JobEvent StateEvent(v1::JobState state, int64_t sequence) {
  v1::JobEvent event;
  event.set_job_id("job-7");
  event.set_sequence(sequence);
  event.mutable_state_change()->set_state(state);
  return event;
}

v1::JobEvent StepEvent(int64_t step, double loss) {
  v1::JobEvent event;
  event.set_job_id("job-7");
  event.set_sequence(step + 1);
  event.mutable_step()->set_step(step);
  event.mutable_step()->set_num_steps(2);
  event.mutable_step()->set_loss(loss);
  event.mutable_step()->set_step_time_seconds(0.25);
  return event;
}

TEST(JobEventPrinterTest, TextLines) {
  std::ostringstream out;
  JobEventPrinter printer(OutputFormat::kText, &out, nullptr);
  printer.OnEvent(StateEvent(v1::JOB_STATE_RUNNING, 0));
  printer.OnEvent(StepEvent(1, 2.5));
  v1::JobEvent with_scalar = StepEvent(2, 1.25);
  v1::StepScalar* accuracy = with_scalar.mutable_step()->add_scalars();
  accuracy->set_tensor("accuracy");
  accuracy->set_value(0.75);
  printer.OnEvent(with_scalar);
  printer.OnEvent(StateEvent(v1::JOB_STATE_SUCCEEDED, 3));
  printer.Finish();
  EXPECT_EQ(out.str(),
            "job-7: RUNNING\n"
            "step 1/2  loss 2.50000  time 250.0 ms\n"
            "step 2/2  loss 1.25000  accuracy 0.75  time 250.0 ms\n"
            "job-7: SUCCEEDED (2 steps, last loss 1.25000)\n");
  EXPECT_EQ(printer.last_state(), v1::JOB_STATE_SUCCEEDED);
}

TEST(JobEventPrinterTest, JsonLines) {
  std::ostringstream out;
  JobEventPrinter printer(OutputFormat::kJson, &out, nullptr);
  printer.OnEvent(StepEvent(1, 2.5));
  v1::JobEvent failed = StateEvent(v1::JOB_STATE_FAILED, 2);
  failed.mutable_state_change()->mutable_error()->set_code(13);
  failed.mutable_state_change()->mutable_error()->set_message("op 'x' failed");
  printer.OnEvent(failed);
  std::istringstream lines(out.str());
  std::string line;
  int count = 0;
  while (std::getline(lines, line)) {
    absl::StatusOr<testing::JsonValue> value = testing::ParseJson(line);
    ASSERT_TRUE(value.ok()) << line;
    EXPECT_NE(value->Find("job_id"), nullptr) << line;
    ++count;
  }
  EXPECT_EQ(count, 2);
  EXPECT_THAT(out.str(), HasSubstr("\"state\":\"JOB_STATE_FAILED\""));
  EXPECT_EQ(printer.last_state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(FormatJobError(printer.last_error()), "INTERNAL: op 'x' failed");
}

TEST(ClusterTablesTest, JobsAndNodes) {
  v1::JobInfo job;
  job.set_job_id("job-3");
  job.set_name("mlp");
  job.set_state(v1::JOB_STATE_PENDING);
  job.set_queue_position(2);
  job.set_num_steps(20);
  job.set_steps_done(0);
  const std::string table = FormatJobTable({job});
  EXPECT_THAT(table, HasSubstr("JOB"));
  EXPECT_THAT(table, HasSubstr("PENDING (2 ahead)"));
  job.set_queue_position(0);
  EXPECT_THAT(FormatJobTable({job}), HasSubstr("PENDING (next)"));
  job.set_queue_position(2);
  EXPECT_THAT(table, HasSubstr("0/20"));
  EXPECT_EQ(FormatJobTable({}), "no jobs\n");
  job.set_state(v1::JOB_STATE_FAILED);
  job.mutable_error()->set_code(8);
  job.mutable_error()->set_message("device node0/cpu:0 over budget");
  EXPECT_THAT(FormatJobStatus(job),
              HasSubstr("error:     RESOURCE_EXHAUSTED: device node0/cpu:0 over budget"));
  EXPECT_THAT(FormatJobStatus(job), Not(HasSubstr("fetches:")));
  EXPECT_THAT(FormatJobStatus(job), Not(HasSubstr("checkpoint:")));
  EXPECT_THAT(FormatJobStatus(job), Not(HasSubstr("trace:")));
  job.set_traced(true);
  EXPECT_THAT(FormatJobStatus(job),
              HasSubstr("trace:     every step (GetTrace once the job ended)"));
  job.mutable_trace_steps()->set_first(100);
  job.mutable_trace_steps()->set_last(101);
  EXPECT_THAT(FormatJobStatus(job), HasSubstr("trace:     steps 100-101"));
  job.set_checkpoint_path("/shared/m.safetensors");
  job.set_checkpoint_step(40);
  job.set_streams_fetches(true);
  EXPECT_THAT(FormatJobStatus(job), HasSubstr("checkpoint: /shared/m.safetensors (after step 40)"));
  EXPECT_THAT(FormatJobStatus(job), HasSubstr("fetches:   streamed; held"));
  job.set_fetches_released(true);
  EXPECT_THAT(FormatJobStatus(job), HasSubstr("fetches:   streamed; released"));

  v1::NodeInfo node;
  node.set_name("node0");
  node.set_address("127.0.0.1:7070");
  node.set_state(v1::NODE_STATE_READY);
  node.set_coordinator(true);
  v1::DeviceInfo* device = node.add_devices();
  device->set_type("cpu");
  device->set_memory_budget_bytes(int64_t{4} << 30);
  const std::string nodes = FormatNodeTable({node});
  EXPECT_THAT(nodes, HasSubstr("coordinator"));
  EXPECT_THAT(nodes, HasSubstr("READY"));
  EXPECT_THAT(nodes, HasSubstr("4.0 GiB"));
  EXPECT_THAT(nodes, HasSubstr("1 (cpu:0)"));
}

// `loomctl submit` reads jobs with ReadJobFile: .json is the proto3 JSON mapping.
TEST(JobFileTest, ReadsJsonJobs) {
  const std::string path =
      (std::filesystem::path(TemporaryDirectory("json_job")) / "job.json").string();
  std::ofstream(path) << R"({"name": "from_json", "num_steps": 3,
      "placement": {"devices": ["cpu:0"]},
      "inputs": [{"name": "x", "shape": ["4"], "random_normal": {"std": 1}}],
      "ops": [{"name": "r", "type": "relu", "inputs": ["x"], "outputs": ["y"]}],
      "fetch": ["y"]})";
  absl::StatusOr<job::Job> job = compiler::ReadJobFile(path);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->name(), "from_json");
  EXPECT_EQ(job->num_steps(), 3);
  EXPECT_EQ(job->ops_size(), 1);
  std::ofstream(path) << "{\"name\": ";
  absl::StatusOr<job::Job> broken = compiler::ReadJobFile(path);
  EXPECT_EQ(broken.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(broken.status().message(), HasSubstr(path));
}

}  // namespace
}  // namespace loom::loomctl
