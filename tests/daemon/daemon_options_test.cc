// loomd's flags, and the refusal to serve plaintext beyond loopback without --insecure.
#include "daemon/daemon_options.h"

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/parallel_for.h"
#include "daemon/daemon.h"
#include "device/host_memory.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace loom::daemon {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<DaemonOptions> Parse(const std::vector<std::string>& arguments) {
  absl::StatusOr<cli::ParsedArguments> parsed = DaemonArgumentSpec().Parse(arguments);
  if (!parsed.ok()) return parsed.status();
  return DaemonOptionsFrom(*parsed);
}

TEST(DaemonOptionsTest, Defaults) {
  absl::StatusOr<DaemonOptions> options = Parse({});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->listen_address, "127.0.0.1:7070");
  EXPECT_EQ(options->devices.ToString(), "cpu:1");
  EXPECT_EQ(options->memory_budget_per_device_bytes, std::nullopt);  // auto
  EXPECT_FALSE(options->node_name.empty());                          // the host name
  EXPECT_EQ(options->max_message_bytes, 64 << 20);
  EXPECT_EQ(options->max_plan_tasks, 2'000'000);
  EXPECT_EQ(options->compile_threads, compiler::DefaultCompileThreads());
  EXPECT_FALSE(options->metrics_plaintext);
  EXPECT_EQ(options->health_listen_address, "");
}

TEST(DaemonOptionsTest, ReadsEveryFlag) {
  absl::StatusOr<DaemonOptions> options = Parse({"--listen",
                                                 "0.0.0.0:0",
                                                 "--node-name",
                                                 "n1",
                                                 "--devices",
                                                 "cpu:4",
                                                 "--memory-budget-per-device",
                                                 "2GiB",
                                                 "--stall-timeout",
                                                 "3s",
                                                 "--shutdown-grace",
                                                 "500ms",
                                                 "--max-message-size",
                                                 "1MiB",
                                                 "--max-plan-tasks",
                                                 "5000",
                                                 "--compile-threads",
                                                 "3",
                                                 "--verbose",
                                                 "--metrics-plaintext",
                                                 "--metrics-listen",
                                                 "0.0.0.0:9400",
                                                 "--health-listen",
                                                 "0.0.0.0:7071"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->listen_address, "0.0.0.0:0");
  EXPECT_EQ(options->node_name, "n1");
  EXPECT_EQ(options->devices.ToString(), "cpu:4");
  EXPECT_EQ(options->memory_budget_per_device_bytes, int64_t{2} << 30);
  EXPECT_EQ(options->stall_timeout, absl::Seconds(3));
  EXPECT_EQ(options->shutdown_grace, absl::Milliseconds(500));
  EXPECT_EQ(options->max_message_bytes, 1 << 20);
  EXPECT_EQ(options->max_plan_tasks, 5000);
  EXPECT_EQ(options->compile_threads, 3);
  EXPECT_TRUE(options->verbose);
  EXPECT_TRUE(options->metrics_plaintext);
  EXPECT_EQ(options->metrics_listen_address, "0.0.0.0:9400");
  EXPECT_EQ(options->health_listen_address, "0.0.0.0:7071");
}

absl::StatusOr<GpuMemory> NoGpus(int device) {
  return absl::FailedPreconditionError(absl::StrCat("asked for cuda:", device));
}

TEST(DaemonOptionsTest, ResolvesTheMemoryBudget) {
  absl::StatusOr<DaemonOptions> options = Parse({"--memory-budget-per-device", "0"});
  ASSERT_TRUE(options.ok()) << options.status();
  absl::StatusOr<MemoryBudget> budget = ResolveMemoryBudget(*options, NoGpus);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, 0);
  EXPECT_EQ(budget->description, "no limit");

  options = Parse({"--memory-budget-per-device", "3MiB"});
  ASSERT_TRUE(options.ok()) << options.status();
  budget = ResolveMemoryBudget(*options, NoGpus);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, 3 << 20);

  // auto: CPU devices share 3/4 of this process's memory.
  absl::StatusOr<HostMemory> host = ReadHostMemory();
  ASSERT_TRUE(host.ok()) << host.status();
  options = Parse({"--devices", "cpu:3", "--memory-budget-per-device", "auto"});
  ASSERT_TRUE(options.ok()) << options.status();
  budget = ResolveMemoryBudget(*options, NoGpus);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, DefaultCpuMemoryBudget(host->bytes, 3));
  EXPECT_THAT(budget->description, HasSubstr("auto: 3/4 of"));
  EXPECT_THAT(budget->description, HasSubstr("over 3 devices"));

  // auto for GPUs: the free memory at start less the reserve, the least of the node's GPUs.
  constexpr int64_t kGiB = int64_t{1} << 30;
  DaemonOptions gpus = *options;
  gpus.devices = {plan::CUDA, {0, 1}};
  budget = ResolveMemoryBudget(gpus, [](int device) -> absl::StatusOr<GpuMemory> {
    return GpuMemory{device == 0 ? 70 * kGiB : 60 * kGiB, 80 * kGiB};
  });
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, 60 * kGiB - 4 * kGiB);  // 1/20 of 80 GiB
  EXPECT_THAT(budget->description,
              HasSubstr("cuda:1's 60.0 GiB free of 80.0 GiB less a reserve of 4.0 GiB"));
  EXPECT_THAT(budget->description, HasSubstr("the least of the GPUs"));
  // A GPU that cannot say: the error names it and how to go on.
  budget = ResolveMemoryBudget(gpus, [](int device) -> absl::StatusOr<GpuMemory> {
    if (device == 1) return absl::FailedPreconditionError("no usable CUDA device");
    return GpuMemory{70 * kGiB, 80 * kGiB};
  });
  EXPECT_EQ(budget.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(budget.status().message(), HasSubstr("cuda:1: no usable CUDA device"));
  EXPECT_THAT(budget.status().message(), HasSubstr("give a size (or 0 for no limit)"));
  // An explicit budget asks no GPU.
  gpus.memory_budget_per_device_bytes = 3 * kGiB;
  budget = ResolveMemoryBudget(gpus, NoGpus);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, 3 * kGiB);
}

// --host-memory-budget (offloaded activations): as given, or auto: an eighth of the host's
// memory beside CPU devices, half beside GPUs.
TEST(DaemonOptionsTest, ResolvesTheHostMemoryBudget) {
  absl::StatusOr<DaemonOptions> options = Parse({"--host-memory-budget", "0"});
  ASSERT_TRUE(options.ok()) << options.status();
  absl::StatusOr<MemoryBudget> budget = ResolveHostMemoryBudget(*options);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, 0);
  EXPECT_EQ(budget->description, "no limit");
  options = Parse({"--host-memory-budget", "5GiB"});
  ASSERT_TRUE(options.ok()) << options.status();
  budget = ResolveHostMemoryBudget(*options);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, int64_t{5} << 30);

  absl::StatusOr<HostMemory> host = ReadHostMemory();
  ASSERT_TRUE(host.ok()) << host.status();
  options = Parse({"--devices", "cpu:2"});
  ASSERT_TRUE(options.ok()) << options.status();
  budget = ResolveHostMemoryBudget(*options);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, host->bytes / 8);
  EXPECT_THAT(budget->description, HasSubstr("auto: 1/8 of"));
  options->devices = {plan::CUDA, {0}};
  budget = ResolveHostMemoryBudget(*options);
  ASSERT_TRUE(budget.ok()) << budget.status();
  EXPECT_EQ(budget->bytes, host->bytes / 2);
  EXPECT_THAT(Parse({"--host-memory-budget", "plenty"}).status().message(),
              HasSubstr("--host-memory-budget"));
}

TEST(DaemonOptionsTest, RefusesBadValuesNamingTheFlag) {
  EXPECT_THAT(Parse({"--devices", "gpu:1"}).status().message(), HasSubstr("cpu:N, cuda:all"));
  EXPECT_THAT(Parse({"--memory-budget-per-device", "lots"}).status().message(),
              HasSubstr("--memory-budget-per-device"));
  EXPECT_THAT(Parse({"--listen", "7070"}).status().message(), HasSubstr("--listen"));
  EXPECT_THAT(Parse({"--metrics-listen", "9400"}).status().message(),
              HasSubstr("--metrics-listen must be HOST:PORT, not '9400'"));
  EXPECT_THAT(Parse({"--health-listen", "7071"}).status().message(),
              HasSubstr("--health-listen must be HOST:PORT, not '7071'"));
  EXPECT_THAT(Parse({"--stall-timeout", "soon"}).status().message(), HasSubstr("--stall-timeout"));
  EXPECT_THAT(Parse({"--max-plan-tasks", "0"}).status().message(),
              HasSubstr("--max-plan-tasks must be a whole number >= 1, not '0'"));
  EXPECT_THAT(Parse({"--compile-threads", "all"}).status().message(),
              HasSubstr("--compile-threads must be a whole number >= 1, not 'all'"));
  EXPECT_THAT(Parse({"--coordinator", "somewhere"}).status().message(), HasSubstr("--coordinator"));
  EXPECT_THAT(Parse({"--coordinator", "10.0.0.1:7070", "--node-rank", "0"}).status().message(),
              HasSubstr("--node-rank"));
  EXPECT_THAT(Parse({"--heartbeat-interval", "5s", "--node-timeout", "1s"}).status().message(),
              HasSubstr("--heartbeat-interval"));
  EXPECT_TRUE(Parse({"--coordinator", "10.0.0.1:7070", "--node-rank", "2"}).ok());
}

TEST(DaemonOptionsTest, TlsFlagsGoTogetherAndNameWhatTheyCannotRead) {
  EXPECT_FALSE(Parse({})->tls.has_value());
  for (const std::vector<std::string>& some :
       {std::vector<std::string>{"--tls-ca", "ca.pem"},
        std::vector<std::string>{"--tls-cert", "node.pem", "--tls-key", "node.key"}}) {
    absl::Status status = Parse(some).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_THAT(status.message(), HasSubstr("--tls-ca, --tls-cert and --tls-key go together"));
  }
  // The files' own checks: tests/rpc/tls_files_test.cc.
  absl::Status missing =
      Parse({"--tls-ca", "/nonexistent/ca.pem", "--tls-cert", "node.pem", "--tls-key", "node.key"})
          .status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(missing.message(), HasSubstr("--tls-ca: cannot read '/nonexistent/ca.pem'"));
}

TEST(DaemonOptionsTest, HelpListsTheFlags) {
  const std::string help = DaemonArgumentSpec().Help();
  for (const char* flag : {"--listen", "--coordinator", "--node-name", "--devices",
                           "--memory-budget-per-device", "--shutdown-grace", "--tls-ca",
                           "--tls-cert", "--tls-key", "--metrics-plaintext", "--health-listen"}) {
    EXPECT_THAT(help, HasSubstr(flag));
  }
}

TEST(ParseByteSizeTest, ReadsUnits) {
  EXPECT_EQ(*ParseByteSize("0"), 0);
  EXPECT_EQ(*ParseByteSize("1234"), 1234);
  EXPECT_EQ(*ParseByteSize("4KiB"), 4096);
  EXPECT_EQ(*ParseByteSize("512MiB"), int64_t{512} << 20);
  EXPECT_EQ(*ParseByteSize("1.5GB"), 1500000000);
  EXPECT_EQ(*ParseByteSize("2 gib"), int64_t{2} << 30);
  EXPECT_FALSE(ParseByteSize("").ok());
  EXPECT_FALSE(ParseByteSize("-1").ok());
  EXPECT_FALSE(ParseByteSize("3 parsecs").ok());
}

TEST(DaemonOptionsTest, NamesGpusByIndex) {
  absl::StatusOr<DaemonOptions> options = Parse({"--devices", "cuda:1,0"});
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->devices.type, plan::CUDA);
  EXPECT_EQ(options->devices.ToString(), "cuda:0,1");
}

// With or without a GPU here: cuda:99 does not exist, and loomd says so before serving.
TEST(DaemonStartTest, RefusesGpusThisMachineDoesNotHave) {
  DaemonOptions options;
  options.listen_address = "127.0.0.1:0";
  options.devices = {plan::CUDA, {0, 99}};
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(daemon.status().message(), HasSubstr("--devices cuda:0,99: "));
}

TEST(PlaintextListenTest, LoopbackAddressesMayServePlaintext) {
  DaemonOptions options;
  for (const char* address : {"127.0.0.1:7070", "127.0.0.2:0", "localhost:7070", "[::1]:7070",
                              "ipv4:127.0.0.1:7070", "[::ffff:127.0.0.1]:1"}) {
    options.listen_address = address;
    EXPECT_TRUE(CheckPlaintextListen(options).ok()) << address;
  }
}

TEST(PlaintextListenTest, OtherAddressesNeedTlsOrInsecure) {
  DaemonOptions options;
  for (const char* address : {"0.0.0.0:7070", "[::]:7070", "10.1.2.3:7070", "node-a:7070", ":7070",
                              "dns:///node-a:7070", "128.0.0.1:7070"}) {
    options.listen_address = address;
    options.insecure = false;
    absl::Status refused = CheckPlaintextListen(options);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << address;
    EXPECT_THAT(refused.message(), HasSubstr(absl::StrCat("'", address, "'")));
    EXPECT_THAT(refused.message(), HasSubstr("--tls-cert"));
    EXPECT_THAT(refused.message(), HasSubstr("--insecure"));
    options.insecure = true;
    EXPECT_TRUE(CheckPlaintextListen(options).ok()) << address;
  }
  options.listen_address = "0.0.0.0:7070";
  options.insecure = false;
  options.tls = TlsCredentials{};
  EXPECT_TRUE(CheckPlaintextListen(options).ok());
}

TEST(PlaintextListenTest, TheDaemonRefusesToStartOnAnyAddressWithoutInsecure) {
  DaemonOptions options;
  options.listen_address = "0.0.0.0:0";
  absl::StatusOr<std::unique_ptr<Daemon>> daemon = Daemon::Start(options);
  ASSERT_FALSE(daemon.ok());
  EXPECT_EQ(daemon.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(daemon.status().message(), HasSubstr("'0.0.0.0:0'"));
}

}  // namespace
}  // namespace loom::daemon
