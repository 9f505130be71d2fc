#include "daemon/daemon_options.h"

#include <unistd.h>

#include <cmath>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "cli/tls_flags.h"
#include "compiler/parallel_for.h"
#include "core/format_bytes.h"
#include "device/host_memory.h"
#include "node/device_backends.h"

namespace loom::daemon {
namespace {

constexpr char kCommand[] = "loomd";

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0 || name[0] == '\0') return "node0";
  return name;
}

absl::StatusOr<absl::Duration> ParseDurationFlag(const cli::ParsedArguments& arguments,
                                                 const std::string& flag) {
  absl::Duration duration;
  const std::string text = arguments.Value(flag);
  if (!absl::ParseDuration(text, &duration) || duration < absl::ZeroDuration()) {
    return cli::UsageError(kCommand, absl::StrCat("--", flag,
                                                  " must be a duration >= 0 (e.g. "
                                                  "500ms, 10s, 2m), not '",
                                                  text, "'"));
  }
  return duration;
}

// A memory budget flag: a byte size, or "auto" (nullopt).
absl::StatusOr<std::optional<int64_t>> ParseBudgetFlag(const cli::ParsedArguments& arguments,
                                                       const std::string& flag) {
  const std::string text = arguments.Value(flag);
  if (text == "auto") return std::nullopt;
  absl::StatusOr<int64_t> budget = ParseByteSize(text);
  if (!budget.ok()) {
    return cli::UsageError(kCommand,
                           absl::StrCat("--", flag, ": ", budget.status().message(), " (or auto)"));
  }
  return *budget;
}

template <typename Integer>
absl::StatusOr<Integer> ParsePositiveFlag(const cli::ParsedArguments& arguments,
                                          const std::string& flag) {
  Integer value = 0;
  const std::string text = arguments.Value(flag);
  if (!absl::SimpleAtoi(text, &value) || value < 1) {
    return cli::UsageError(
        kCommand, absl::StrCat("--", flag, " must be a whole number >= 1, not '", text, "'"));
  }
  return value;
}

}  // namespace

cli::ArgumentSpec DaemonArgumentSpec() {
  cli::ArgumentSpec spec(
      kCommand,
      "The Loom daemon. Serves the gRPC API loom.v1 (JobService: SubmitJob, GetJob, ListJobs,\n"
      "CancelJob, WatchJob, GetPlan; ClusterService: ListNodes), the standard grpc.health.v1\n"
      "Health service and server reflection. Without --coordinator this daemon is the\n"
      "coordinator (node 0) and also a worker: it compiles every submitted job for the devices\n"
      "of every node that joined it, queues the jobs first in, first out and runs one at a\n"
      "time, launching each node's part of the plan on that node (UCX between nodes), and\n"
      "streams each training step's loss and time to WatchJob. With --coordinator it is a\n"
      "worker: it joins the coordinator (and rejoins it after a restart), sends heartbeats and\n"
      "runs its part of the jobs.\n\n"
      "SIGTERM, SIGINT or SIGHUP: stop taking jobs, cancel the queued ones, give the running\n"
      "one --shutdown-grace to finish (then cancel it), and exit 0.");
  spec.AddFlag("listen", "HOST:PORT", "127.0.0.1:7070",
               "the address to serve on; port 0 picks a free port (printed at start)")
      .AddFlag("coordinator", "HOST:PORT", "",
               "the coordinator to join as a worker; absent: this daemon is the coordinator")
      .AddFlag("node-rank", "N", "-1",
               "workers: the node index to ask for (e.g. a StatefulSet pod ordinal; 0 is the "
               "coordinator's); -1: the next free index")
      .AddFlag("heartbeat-interval", "DURATION", "1s",
               "coordinator: how often workers send heartbeats; workers: how often they ping the "
               "coordinator (gRPC keepalive)")
      .AddFlag("node-timeout", "DURATION", "5s",
               "coordinator: a worker silent for this long is lost, and its running job fails; "
               "workers: a coordinator that leaves a ping unanswered this long is lost (the "
               "node's job is aborted and the worker reconnects)")
      .AddFlag("peer-probe-timeout", "DURATION", "5s",
               "coordinator: while a job launches, how long each node waits to hear from every "
               "other node of the job over UCX; a node that cannot reach another fails the "
               "launch with an error naming them")

      .AddFlag("metrics-listen", "HOST:PORT", "",
               "serve Prometheus metrics (GET /metrics) on this address, e.g. 0.0.0.0:9400; port 0 "
               "picks a free port (printed at start); empty: no metrics. With --tls-*: HTTPS, and "
               "a scraper must present a certificate of --tls-ca's authority")
      .AddSwitch("metrics-plaintext",
                 "with --tls-*: serve /metrics over plain HTTP all the same (for a scraper "
                 "without a client certificate; bind it to a private address)")
      .AddFlag("health-listen", "HOST:PORT", "",
               "also serve grpc.health.v1.Health, and nothing else, in plaintext on this address "
               "(the status of the main server): for probes that cannot present a certificate "
               "when --tls-* is on, such as Kubernetes' gRPC probes; port 0 picks a free port "
               "(printed at start); empty: none")
      .AddFlag("data-dir", "DIR", "",
               "keep state here across restarts (created if missing; one loomd per directory): "
               "the coordinator's jobs, with their events, plans, traces and ids. Jobs that had "
               "not ended when it stopped are FAILED after the restart. Empty: nothing is kept")
      .AddRepeatedFlag("data-root", "DIR",
                       "jobs may read files (token files, safetensors inputs, initial states) "
                       "only beneath this directory, without following symbolic links; without "
                       "any, a job that names a file is refused (PERMISSION_DENIED)")
      .AddRepeatedFlag("checkpoint-root", "DIR",
                       "jobs may write checkpoints (checkpoint_path) only beneath this directory, "
                       "and read initial states from it; without any, checkpoint_path is refused")
      .AddSwitch("insecure",
                 "without --tls-*, serve gRPC in plaintext on a non-loopback --listen address "
                 "anyway (anyone who reaches it may submit jobs and join as a node)")
      .AddFlag("max-nodes", "N", "256",
               "coordinator: the most nodes registered at once, READY or MISSING; a registration "
               "beyond them is refused (RESOURCE_EXHAUSTED)")
      .AddFlag("missing-node-expiry", "DURATION", "10m",
               "coordinator: a node MISSING for this long is forgotten (its index is freed)")
      .AddFlag("release-timeout", "DURATION", "30s",
               "a node whose part of a job has not ended this long after it was told to release "
               "it reports itself unhealthy (health NOT_SERVING, the node shown as such) until it "
               "does")
      .AddFlag("max-trace-events-per-job", "N", "2000000",
               "the most acts a traced job records on each node (about 100 bytes each); beyond "
               "them its trace is truncated and says so")
      .AddFlag("node-name", "NAME", "", "this node's name (default: the host name)")
      .AddFlag("devices", "SPEC", "cpu:1",
               "the devices of this node: cpu:N (N CPU devices), cuda:all (every GPU) or "
               "cuda:I[,J...] (those GPUs)")
      .AddFlag("memory-budget-per-device", "BYTES", "auto",
               "the memory a job may use on each device, e.g. 4GiB; 0: no limit; auto: CPU "
               "devices share 3/4 of the host's memory (or of the memory cgroup's limit), GPUs "
               "get their free memory at start less a reserve (the larger of 1 GiB and 5%). A "
               "job over it is refused (RESOURCE_EXHAUSTED naming the device)")
      .AddFlag("host-memory-budget", "BYTES", "auto",
               "the host memory jobs may give offloaded activations (offload_activations) on "
               "this node in all; 0: no limit; auto: 1/8 of the host's memory (or of the memory "
               "cgroup's limit) beside CPU devices, 1/2 beside GPUs")
      .AddFlag("stall-timeout", "DURATION", "10s",
               "fail a job when none of its actors acts for this long")
      .AddFlag("shutdown-grace", "DURATION", "20s",
               "on SIGTERM, how long the running job may go on before it is cancelled")
      .AddFlag("max-message-size", "BYTES", "64MiB",
               "the largest gRPC message received or sent (larger: RESOURCE_EXHAUSTED). Between a "
               "worker and its coordinator the smaller of their two applies: a job whose part of "
               "the plan or streamed piece would not fit is refused at submit")
      .AddFlag("max-pending-jobs", "N", "1000",
               "jobs that may wait in the queue; a submission beyond them is refused "
               "(RESOURCE_EXHAUSTED) until some have started or been cancelled")
      .AddFlag("max-plan-tasks", "N", "2000000",
               "the most tasks a submitted job may compile into, and the plans of the jobs "
               "waiting in the queue together (a plan takes about 2 KiB of the coordinator's "
               "memory per task; jobs compile one at a time); beyond it a job is refused "
               "(RESOURCE_EXHAUSTED, naming the op that crossed it, or the waiting plans)")
      .AddFlag("compile-threads", "N", absl::StrCat(compiler::DefaultCompileThreads()),
               "the most threads a compile uses where it works node by node (the split into "
               "node plans, the memory check); the default is this machine's hardware threads")
      .AddFlag("max-watches", "N", "1000",
               "WatchJob streams served at once (each holds a thread while it waits); more are "
               "refused (RESOURCE_EXHAUSTED)")
      .AddFlag("max-finished-jobs", "N", "1000",
               "finished jobs remembered for GetJob, ListJobs, WatchJob and GetPlan")
      .AddFlag("max-events-per-job", "N", "10000",
               "step events kept per job for late watchers (older ones are dropped)")
      .AddFlag("max-fetched-bytes", "BYTES", "256MiB",
               "the most bytes of fetched tensors a job may stream to its watchers (loomctl "
               "submit --fetch-dir); the coordinator holds them in memory until the next such job "
               "starts. A job that would stream more is refused (RESOURCE_EXHAUSTED)")
      .AddFlag("max-kept-trace-bytes", "BYTES", "1GiB",
               "without --data-dir: the most bytes of finished jobs' traces the coordinator keeps "
               "in memory, compressed; the oldest traces go first (the newest is always kept)")
      .AddFlag("blas-threads", "N", "1", "OpenBLAS threads per GEMM")
      .AddSwitch("verbose", "log INFO messages (default: warnings and errors only)");
  cli::AddTlsFlags(spec);
  return spec;
}

absl::StatusOr<DaemonOptions> DaemonOptionsFrom(const cli::ParsedArguments& arguments) {
  DaemonOptions options;
  options.listen_address = arguments.Value("listen");
  if (options.listen_address.empty() || options.listen_address.find(':') == std::string::npos) {
    return cli::UsageError(
        kCommand, absl::StrCat("--listen must be HOST:PORT, not '", options.listen_address, "'"));
  }
  options.coordinator_address = arguments.Value("coordinator");
  if (!options.coordinator_address.empty() &&
      options.coordinator_address.find(':') == std::string::npos) {
    return cli::UsageError(kCommand, absl::StrCat("--coordinator must be HOST:PORT, not '",
                                                  options.coordinator_address, "'"));
  }
  if (!absl::SimpleAtoi(arguments.Value("node-rank"), &options.node_rank) ||
      options.node_rank < -1 || (options.node_rank == 0 && !options.coordinator_address.empty())) {
    return cli::UsageError(kCommand,
                           absl::StrCat("--node-rank must be -1 or a node index >= 1 (0 is the "
                                        "coordinator's), not '",
                                        arguments.Value("node-rank"), "'"));
  }

  for (auto [flag, target] : std::vector<std::pair<const char*, std::string*>>{
           {"metrics-listen", &options.metrics_listen_address},
           {"health-listen", &options.health_listen_address}}) {
    *target = arguments.Value(flag);
    if (!target->empty() && target->find(':') == std::string::npos) {
      return cli::UsageError(kCommand,
                             absl::StrCat("--", flag, " must be HOST:PORT, not '", *target, "'"));
    }
  }

  options.data_directory = arguments.Value("data-dir");
  options.data_roots = arguments.Values("data-root");
  options.checkpoint_roots = arguments.Values("checkpoint-root");
  options.insecure = arguments.Switch("insecure");
  absl::StatusOr<int64_t> trace_events =
      ParsePositiveFlag<int64_t>(arguments, "max-trace-events-per-job");
  if (!trace_events.ok()) return trace_events.status();
  options.max_trace_events_per_job = *trace_events;

  options.node_name = arguments.Value("node-name");
  if (options.node_name.empty()) options.node_name = HostName();

  absl::StatusOr<cli::DeviceSpec> devices =
      cli::ParseDeviceSpec(kCommand, arguments.Value("devices"), CudaDeviceCount);
  if (!devices.ok()) return devices.status();
  options.devices = *std::move(devices);

  for (auto [flag, target] :
       {std::pair{"memory-budget-per-device", &options.memory_budget_per_device_bytes},
        std::pair{"host-memory-budget", &options.host_memory_budget_bytes}}) {
    absl::StatusOr<std::optional<int64_t>> budget = ParseBudgetFlag(arguments, flag);
    if (!budget.ok()) return budget.status();
    *target = *budget;
  }

  absl::StatusOr<int64_t> message_bytes = ParseByteSize(arguments.Value("max-message-size"));
  if (!message_bytes.ok() || *message_bytes < 1024 ||
      *message_bytes > std::numeric_limits<int>::max()) {
    return cli::UsageError(
        kCommand, absl::StrCat("--max-message-size must be a size from 1KiB to 2GiB, not '",
                               arguments.Value("max-message-size"), "'"));
  }
  options.max_message_bytes = static_cast<int>(*message_bytes);

  absl::StatusOr<int64_t> fetched_bytes = ParseByteSize(arguments.Value("max-fetched-bytes"));
  if (!fetched_bytes.ok()) {
    return cli::UsageError(kCommand,
                           absl::StrCat("--max-fetched-bytes: ", fetched_bytes.status().message()));
  }
  options.max_fetched_bytes = *fetched_bytes;
  absl::StatusOr<int64_t> trace_bytes = ParseByteSize(arguments.Value("max-kept-trace-bytes"));
  if (!trace_bytes.ok()) {
    return cli::UsageError(
        kCommand, absl::StrCat("--max-kept-trace-bytes: ", trace_bytes.status().message()));
  }
  options.max_kept_trace_bytes = *trace_bytes;

  for (auto [flag, target] : std::vector<std::pair<const char*, absl::Duration*>>{
           {"stall-timeout", &options.stall_timeout},
           {"shutdown-grace", &options.shutdown_grace},
           {"heartbeat-interval", &options.heartbeat_interval},
           {"node-timeout", &options.node_timeout},
           {"peer-probe-timeout", &options.peer_probe_timeout},
           {"missing-node-expiry", &options.missing_node_expiry},
           {"release-timeout", &options.release_timeout}}) {
    absl::StatusOr<absl::Duration> duration = ParseDurationFlag(arguments, flag);
    if (!duration.ok()) return duration.status();
    *target = *duration;
  }
  for (auto [flag, target] : std::vector<std::pair<const char*, int*>>{
           {"max-pending-jobs", &options.max_pending_jobs},
           {"max-plan-tasks", &options.max_plan_tasks},
           {"compile-threads", &options.compile_threads},
           {"max-watches", &options.max_watches},
           {"max-finished-jobs", &options.max_finished_jobs},
           {"max-events-per-job", &options.max_events_per_job},
           {"max-nodes", &options.max_nodes},
           {"blas-threads", &options.blas_threads}}) {
    absl::StatusOr<int> value = ParsePositiveFlag<int>(arguments, flag);
    if (!value.ok()) return value.status();
    *target = *value;
  }
  options.verbose = arguments.Switch("verbose");
  options.metrics_plaintext = arguments.Switch("metrics-plaintext");
  absl::StatusOr<std::optional<TlsCredentials>> tls = cli::TlsFromArguments(kCommand, arguments);
  if (!tls.ok()) return tls.status();
  options.tls = *std::move(tls);
  for (auto [flag, duration] : std::vector<std::pair<const char*, absl::Duration>>{
           {"peer-probe-timeout", options.peer_probe_timeout},
           {"release-timeout", options.release_timeout},
           {"missing-node-expiry", options.missing_node_expiry}}) {
    if (duration <= absl::ZeroDuration()) {
      return cli::UsageError(kCommand, absl::StrCat("--", flag, " must be > 0"));
    }
  }
  if (options.heartbeat_interval <= absl::ZeroDuration() ||
      options.node_timeout <= options.heartbeat_interval) {
    return cli::UsageError(kCommand, "--heartbeat-interval must be > 0 and below --node-timeout");
  }
  return options;
}

absl::StatusOr<MemoryBudget> ResolveMemoryBudget(const DaemonOptions& options,
                                                 const GpuMemoryQuery& gpu_memory) {
  if (options.memory_budget_per_device_bytes.has_value()) {
    const int64_t bytes = *options.memory_budget_per_device_bytes;
    return MemoryBudget{bytes, bytes == 0 ? "no limit" : FormatBytes(bytes)};
  }
  if (options.devices.type == plan::CUDA) {
    MemoryBudget budget;
    for (int index : options.devices.indices) {
      absl::StatusOr<GpuMemory> memory = gpu_memory(index);
      if (!memory.ok()) {
        return absl::Status(
            memory.status().code(),
            absl::StrCat("--memory-budget-per-device auto: cuda:", index, ": ",
                         memory.status().message(), "; give a size (or 0 for no limit)"));
      }
      const int64_t bytes = DefaultGpuMemoryBudget(*memory);
      if (budget.bytes == 0 || bytes < budget.bytes) {
        budget = MemoryBudget{
            bytes,
            absl::StrCat(FormatBytes(bytes), " (auto: cuda:", index, "'s ",
                         FormatBytes(memory->free_bytes), " free of ",
                         FormatBytes(memory->total_bytes), " less a reserve of ",
                         FormatBytes(GpuMemoryReserve(memory->total_bytes)),
                         options.devices.indices.size() > 1 ? ", the least of the GPUs" : "", ")")};
      }
    }
    return budget;
  }
  absl::StatusOr<HostMemory> host = ReadHostMemory();
  if (!host.ok()) {
    return absl::Status(host.status().code(),
                        absl::StrCat("--memory-budget-per-device auto: ", host.status().message(),
                                     "; give a size (or 0 for no limit)"));
  }
  const int devices = static_cast<int>(options.devices.indices.size());
  const int64_t bytes = DefaultCpuMemoryBudget(host->bytes, devices);
  return MemoryBudget{bytes, absl::StrCat(FormatBytes(bytes), " (auto: 3/4 of ",
                                          FormatBytes(host->bytes), ", ", host->source, ", over ",
                                          devices, " device", devices == 1 ? "" : "s", ")")};
}

absl::StatusOr<MemoryBudget> ResolveHostMemoryBudget(const DaemonOptions& options) {
  if (options.host_memory_budget_bytes.has_value()) {
    const int64_t bytes = *options.host_memory_budget_bytes;
    return MemoryBudget{bytes, bytes == 0 ? "no limit" : FormatBytes(bytes)};
  }
  absl::StatusOr<HostMemory> host = ReadHostMemory();
  if (!host.ok()) {
    return absl::Status(host.status().code(),
                        absl::StrCat("--host-memory-budget auto: ", host.status().message(),
                                     "; give a size (or 0 for no limit)"));
  }
  const bool gpus = options.devices.type == plan::CUDA;
  const int64_t bytes = DefaultHostMemoryBudget(host->bytes, gpus);
  return MemoryBudget{bytes,
                      absl::StrCat(FormatBytes(bytes), " (auto: ", gpus ? "1/2" : "1/8", " of ",
                                   FormatBytes(host->bytes), ", ", host->source, ")")};
}

absl::StatusOr<int64_t> ParseByteSize(absl::string_view text) {
  std::string trimmed(absl::StripAsciiWhitespace(text));
  size_t unit_start = 0;
  while (unit_start < trimmed.size() &&
         (absl::ascii_isdigit(trimmed[unit_start]) || trimmed[unit_start] == '.')) {
    ++unit_start;
  }
  const std::string number = trimmed.substr(0, unit_start);
  std::string unit = absl::AsciiStrToLower(absl::StripAsciiWhitespace(trimmed.substr(unit_start)));
  double value = 0;
  if (number.empty() || !absl::SimpleAtod(number, &value)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", text, "' is not a size in bytes (e.g. 1073741824, 512MiB, 4GiB)"));
  }
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},
      {"b", 1},
      {"kb", 1e3},
      {"mb", 1e6},
      {"gb", 1e9},
      {"tb", 1e12},
      {"kib", 1024.0},
      {"mib", 1024.0 * 1024},
      {"gib", 1024.0 * 1024 * 1024},
      {"tib", 1024.0 * 1024 * 1024 * 1024}};
  for (const auto& [name, scale] : kUnits) {
    if (unit != name) continue;
    const double bytes = std::round(value * scale);
    if (bytes > static_cast<double>(std::numeric_limits<int64_t>::max())) break;
    return static_cast<int64_t>(bytes);
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", text, "' is not a size in bytes: units are B, KB, MB, GB, TB, KiB, MiB, GiB, TiB"));
}

}  // namespace loom::daemon
