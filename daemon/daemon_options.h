#ifndef LOOM_DAEMON_DAEMON_OPTIONS_H_
#define LOOM_DAEMON_DAEMON_OPTIONS_H_

// loomd's configuration: DaemonOptions (one field per flag), DaemonArgumentSpec (the flags and
// --help, as a cli::ArgumentSpec) and DaemonOptionsFrom, which reads parsed arguments into them.
// Also ResolveMemoryBudget, each device's memory budget as given or for `auto`, and ParseByteSize,
// the byte sizes the flags take ("512MiB", "4GiB").

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "cli/arguments.h"
#include "cli/device_spec.h"
#include "device/gpu_memory_budget.h"
#include "rpc/tls.h"

namespace loom::daemon {

// How one loomd runs (its flags; see DaemonArgumentSpec for what each means).
struct DaemonOptions {
  // host:port; port 0 picks a free port (the daemon prints the one it got).
  std::string listen_address = "127.0.0.1:7070";
  // Empty: this daemon is the coordinator (node 0, and also a worker).
  std::string coordinator_address;
  std::string node_name;
  // Workers: the node index to ask for; -1: the next free one.
  int node_rank = -1;
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration node_timeout = absl::Seconds(5);
  // While a job launches: how long each node waits for a probe from every peer.
  absl::Duration peer_probe_timeout = absl::Seconds(5);
  // HOST:PORT for Prometheus' GET /metrics (port 0 picks a free port); empty: not served.
  std::string metrics_listen_address;
  // With `tls`: serve /metrics over plain HTTP anyway (without: HTTPS, mutual TLS).
  bool metrics_plaintext = false;
  // HOST:PORT of a second gRPC server, always plaintext, with grpc.health.v1.Health alone (the
  // main server's status): for probes that cannot present a certificate. Port 0 picks a free
  // port; empty: none.
  std::string health_listen_address;
  // Where the coordinator keeps its jobs across restarts (locked against a second loomd); empty:
  // nothing is kept on disk.
  std::string data_directory;
  // The directories beneath which jobs may read files (--data-root, repeatable): token files,
  // safetensors inputs, initial states. None: a job that names a file is refused.
  std::vector<std::string> data_roots;
  // The directories beneath which jobs may write checkpoints (--checkpoint-root, repeatable); a
  // checkpoint's initial state may also be read from them. None: checkpoint_path is refused.
  std::vector<std::string> checkpoint_roots;
  // Serve gRPC in plaintext on a non-loopback address (without it, loomd refuses to listen there
  // without --tls-*).
  bool insecure = false;
  // The coordinator: the most nodes registered at once (READY or MISSING); more are refused.
  int max_nodes = 256;
  // The coordinator: a MISSING node is forgotten after this long (its index freed).
  absl::Duration missing_node_expiry = absl::Minutes(10);
  // A node whose part of a job has not ended this long after it was told to release it reports
  // itself unhealthy (health NOT_SERVING, the node shown as such) until it ends.
  absl::Duration release_timeout = absl::Seconds(30);
  // The most acts a traced job records on each node (more: the trace is truncated and says so).
  int64_t max_trace_events_per_job = 2'000'000;
  // This node's devices (--devices): cpu:1 unless told.
  cli::DeviceSpec devices = {plan::CPU, {0}};
  // Each device's memory budget; 0: no limit; nullopt (`auto`): see ResolveMemoryBudget.
  std::optional<int64_t> memory_budget_per_device_bytes;
  // The host memory jobs may give offloaded activations on this node; 0: no limit; nullopt
  // (`auto`): see ResolveHostMemoryBudget.
  std::optional<int64_t> host_memory_budget_bytes;
  absl::Duration stall_timeout = absl::Seconds(10);
  // On SIGTERM, how long the running job may go on before it is cancelled.
  absl::Duration shutdown_grace = absl::Seconds(20);
  // The largest gRPC message received or sent.
  int max_message_bytes = 64 << 20;
  // Jobs that may wait in the queue (more: SubmitJob is RESOURCE_EXHAUSTED).
  int max_pending_jobs = 1000;
  // The most tasks a submitted job may compile into, and the waiting jobs' plans together (more:
  // RESOURCE_EXHAUSTED).
  int max_plan_tasks = 2'000'000;
  // The threads a compile's node-by-node passes use at most; 0: the machine's hardware threads.
  int compile_threads = 0;
  // WatchJob streams served at once (more: RESOURCE_EXHAUSTED).
  int max_watches = 1000;
  // Finished jobs kept for GetJob / ListJobs / WatchJob / GetPlan (the oldest are forgotten).
  int max_finished_jobs = 1000;
  // Step events kept per job for late watchers (the oldest are dropped; state changes are kept).
  int max_events_per_job = 10000;
  // The most bytes of fetched tensors one job may stream to its watchers (held on the
  // coordinator until the next such job starts).
  int64_t max_fetched_bytes = int64_t{256} << 20;
  // Without a data directory: the most bytes of finished jobs' compressed traces kept in memory
  // (the oldest are dropped first; the newest is kept whatever its size).
  int64_t max_kept_trace_bytes = int64_t{1} << 30;
  int blas_threads = 1;
  bool verbose = false;
  // --tls-ca / --tls-cert / --tls-key, read at start: every gRPC connection of the daemon (its
  // server, a worker's session) is mutual TLS, and so is /metrics unless metrics_plaintext.
  // nullopt: plaintext.
  std::optional<TlsCredentials> tls;
};

// loomd's flags and --help text.
cli::ArgumentSpec DaemonArgumentSpec();

// INVALID_ARGUMENT naming the flag when a value is malformed.
absl::StatusOr<DaemonOptions> DaemonOptionsFrom(const cli::ParsedArguments& arguments);

// The memory budget of each of this node's devices, and how it was chosen (for the start-up line).
struct MemoryBudget {
  int64_t bytes = 0;  // 0: no limit
  std::string description;
};

// What a GPU's memory is: its free and total bytes (CudaDeviceMemory in node/device_backends.h).
using GpuMemoryQuery = std::function<absl::StatusOr<GpuMemory>(int device)>;

// --memory-budget-per-device as given, or for `auto`: CPU devices share three quarters of the
// memory this process may use (device/host_memory.h: the host's, or its cgroup's limit); GPUs get
// the free memory `gpu_memory` reports at start less a reserve (device/gpu_memory_budget.h), the
// smallest over this node's GPUs, so that the exact estimate refuses a job larger than a GPU
// when it is submitted.
absl::StatusOr<MemoryBudget> ResolveMemoryBudget(const DaemonOptions& options,
                                                 const GpuMemoryQuery& gpu_memory);

// --host-memory-budget as given, or for `auto` DefaultHostMemoryBudget (device/host_memory.h) of
// the memory this process may use.
absl::StatusOr<MemoryBudget> ResolveHostMemoryBudget(const DaemonOptions& options);

// "1073741824", "512MiB", "4GiB", "1.5GB", "0": a number of bytes with an optional unit (B, KB,
// MB, GB, TB powers of 1000; KiB, MiB, GiB, TiB powers of 1024). INVALID_ARGUMENT otherwise.
absl::StatusOr<int64_t> ParseByteSize(absl::string_view text);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_DAEMON_OPTIONS_H_
