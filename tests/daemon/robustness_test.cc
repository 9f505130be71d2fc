// Malformed requests never crash the daemon (a body that does not parse is INVALID_ARGUMENT naming
// the method and request type); the health service answers; messages over the limit are
// RESOURCE_EXHAUSTED.
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon/daemon_test_util.h"

namespace loom::daemon::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using RobustnessTest = DaemonTest;

TEST_F(RobustnessTest, HealthIsServing) {
  std::string response;
  grpc::Status status = RawUnaryCall("/grpc.health.v1.Health/Check", "", &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response, kHealthServing);
  status = RawUnaryCall("/grpc.health.v1.Health/Check", HealthCheckRequest("loom.v1.JobService"),
                        &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response, kHealthServing);
}

TEST_F(RobustnessTest, GarbageRequestBodiesDoNotCrashTheDaemon) {
  // None parses as any message: a varint past 10 bytes, a length far past the end, field 0.
  const std::vector<std::string> bodies = {
      std::string("\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff garbage", 18),
      std::string("\x0a\xff\xff\xff\x0f", 5),
      std::string(1000, '\x00'),
  };
  struct Method {
    std::string name;
    std::string request_type;
  };
  const std::vector<Method> methods = {
      {"/loom.v1.JobService/SubmitJob", "loom.v1.SubmitJobRequest"},
      {"/loom.v1.JobService/GetJob", "loom.v1.GetJobRequest"},
      {"/loom.v1.JobService/CancelJob", "loom.v1.CancelJobRequest"},
      {"/loom.v1.JobService/WatchJob", "loom.v1.WatchJobRequest"},  // server-streaming
      {"/loom.v1.ClusterService/ListNodes", "loom.v1.ListNodesRequest"},
  };
  for (const Method& method : methods) {
    for (const std::string& body : bodies) {
      std::string response;
      grpc::Status status = RawUnaryCall(method.name, body, &response);
      // INVALID_ARGUMENT naming the method and its request type (not gRPC's INTERNAL with an
      // empty message), and nothing of the body.
      EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
          << method.name << ": " << status.error_message();
      EXPECT_EQ(status.error_message(), absl::StrCat("the request body of ", method.name,
                                                     " is not a valid ", method.request_type));
      EXPECT_THAT(status.error_message(), Not(HasSubstr("garbage")));
      for (char byte : status.error_message()) {
        EXPECT_TRUE(byte >= 0x20 && byte < 0x7f) << method.name << ": " << status.error_message();
      }
    }
  }
  // An unknown method is gRPC's UNIMPLEMENTED, whatever its body.
  for (const std::string& body : bodies) {
    std::string response;
    grpc::Status status = RawUnaryCall("/loom.v1.JobService/NoSuchMethod", body, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  }
  // A body that parses reaches the service, whose own answer is left alone: an empty GetJob
  // request names no job.
  std::string response;
  grpc::Status status = RawUnaryCall("/loom.v1.JobService/GetJob", "", &response);
  EXPECT_FALSE(status.ok());
  EXPECT_NE(status.error_code(), grpc::StatusCode::INTERNAL) << status.error_message();
  EXPECT_THAT(status.error_message(), Not(HasSubstr("request body")));
  // And the daemon still serves.
  ASSERT_TRUE(RawUnaryCall("/grpc.health.v1.Health/Check", "", &response).ok());
  EXPECT_EQ(response, kHealthServing);
}

TEST_F(RobustnessTest, MalformedJobsAreRefusedWithoutCrashing) {
  const std::vector<std::string> jobs = {
      "",
      R"pb(name: "no_ops"
           placement { devices: "cpu:0" })pb",
      R"pb(name: "bad_device"
           placement { devices: "tpu:x" }
           ops { name: "op" type: "relu" inputs: "nothing" outputs: "y" })pb",
      R"pb(name: "negative"
           placement { devices: "cpu:0" }
           inputs {
             name: "x"
             shape: [ -4, 2 ]
             random_normal { std: 1 }
           }
           ops { name: "r" type: "relu" inputs: "x" outputs: "y" }
           fetch: "y")pb",
      R"pb(name: "huge"
           placement { devices: "cpu:0" }
           inputs {
             name: "x"
             shape: [ 4611686018427387904, 4 ]
             random_normal { std: 1 }
           }
           ops { name: "r" type: "relu" inputs: "x" outputs: "y" }
           fetch: "y")pb",
      R"pb(name: "cycle"
           placement { devices: "cpu:0" }
           ops { name: "a" type: "relu" inputs: "b" outputs: "a" }
           ops { name: "b" type: "relu" inputs: "a" outputs: "b" }
           fetch: "a")pb",
      R"pb(name: "no_outputs"
           placement { devices: "cpu:0" }
           inputs {
             name: "x"
             shape: [ 4 ]
             random_normal { std: 1 }
           }
           ops { name: "r" type: "relu" inputs: "x" }
           fetch: "x")pb",
      R"pb(name: "bad_loss"
           placement { devices: "cpu:0" }
           loss: "missing"
           optimizer { sgd { learning_rate: 1 } }
           inputs {
             name: "x"
             shape: [ 4 ]
             random_normal { std: 1 }
           }
           ops { name: "r" type: "relu" inputs: "x" outputs: "y" })pb",
  };
  for (const std::string& text : jobs) {
    v1::SubmitJobResponse response;
    grpc::Status status = Submit(ParseJob(text), &response);
    EXPECT_FALSE(status.ok()) << text;
    EXPECT_NE(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
  }
  // Terabytes: over the default budget (a share of this host's memory), refused at submit naming
  // the device.
  const job::Job terabytes_job =
      ParseJob(R"pb(name: "terabytes"
                    placement { devices: "cpu:0" }
                    inputs {
                      name: "x"
                      shape: [ 1099511627776, 4 ]
                      random_normal { std: 1 }
                    }
                    ops { name: "r" type: "relu" inputs: "x" outputs: "y" }
                    fetch: "y")pb");
  v1::SubmitJobResponse terabytes;
  grpc::Status refused = Submit(terabytes_job, &terabytes);
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_THAT(refused.error_message(), HasSubstr("device node0/cpu:0 needs"));

  // Without a budget (--memory-budget-per-device 0): admitted, then failed by the runtime's
  // allocation (RESOURCE_EXHAUSTED naming the device and register), not a crash.
  DaemonOptions unlimited = TestOptions();
  unlimited.memory_budget_per_device_bytes = 0;
  StartDaemon(unlimited);
  ASSERT_TRUE(Submit(terabytes_job, &terabytes).ok());
  std::vector<v1::JobEvent> events = WatchToEnd(terabytes.job().job_id());
  ASSERT_FALSE(events.empty());
  EXPECT_EQ(events.back().state_change().state(), v1::JOB_STATE_FAILED);
  EXPECT_EQ(events.back().state_change().error().code(),
            static_cast<int>(grpc::StatusCode::RESOURCE_EXHAUSTED));
  EXPECT_THAT(events.back().state_change().error().message(), HasSubstr("cpu:0"));

  // Still up, and still running jobs.
  const std::string id = SubmitOrDie(TrainingJob(1));
  EXPECT_EQ(StatesOf(WatchToEnd(id)).back(), v1::JOB_STATE_SUCCEEDED);
}

TEST_F(RobustnessTest, AMessageOverTheLimitIsResourceExhausted) {
  DaemonOptions options = TestOptions();
  options.max_message_bytes = 4096;
  StartDaemon(options);
  job::Job job = TrainingJob(1);
  job.set_name(std::string(10000, 'n'));
  v1::SubmitJobResponse response;
  grpc::Status status = Submit(job, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  // A small one still passes.
  EXPECT_TRUE(Submit(TrainingJob(1), &response).ok());
}

TEST_F(RobustnessTest, CallsAfterShutdownFailInsteadOfHanging) {
  daemon_->Shutdown(absl::ZeroDuration());
  std::string response;
  // The server is gone: the call fails (UNAVAILABLE) instead of hanging.
  grpc::Status status = RawUnaryCall("/grpc.health.v1.Health/Check", "", &response);
  EXPECT_FALSE(status.ok());
}

TEST_F(RobustnessTest, ASecondDaemonOnTheSameAddressDoesNotStart) {
  // Without this, gRPC's SO_REUSEPORT let both serve the port and clients reach either.
  DaemonOptions options = TestOptions();
  options.listen_address = daemon_->address();
  absl::StatusOr<std::unique_ptr<Daemon>> second = Daemon::Start(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(second.status().message(),
              HasSubstr(absl::StrCat("cannot serve on '", daemon_->address(), "'")));
  std::string response;
  ASSERT_TRUE(RawUnaryCall("/grpc.health.v1.Health/Check", "", &response).ok());
  EXPECT_EQ(response, kHealthServing);
}

}  // namespace
}  // namespace loom::daemon::testing
