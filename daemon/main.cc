// loomd: the Loom daemon (see daemon/README.md and `loomd --help`).
#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "cli/arguments.h"
#include "daemon/daemon.h"
#include "daemon/daemon_options.h"
#include "daemon/systemd_notify.h"
#include "glog/logging.h"

int main(int argc, char** argv) {
  google::InitGoogleLogging(argv[0]);
  // Debian's Abseil is built with assertions, whose absl::Mutex aborts the process on a lock-order
  // cycle it merely could deadlock on; a daemon reports such a cycle in its log instead (the
  // tests, which keep the default, abort on one).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kReport);
  FLAGS_logtostderr = true;

  const loom::cli::ArgumentSpec spec = loom::daemon::DaemonArgumentSpec();
  absl::StatusOr<loom::cli::ParsedArguments> parsed =
      spec.Parse(std::vector<std::string>(argv + 1, argv + argc));
  if (!parsed.ok()) {
    std::cerr << parsed.status().message() << "\n";
    return loom::cli::kExitUsage;
  }
  if (parsed->help_requested()) {
    std::cout << spec.Help();
    return loom::cli::kExitSuccess;
  }
  absl::StatusOr<loom::daemon::DaemonOptions> options = loom::daemon::DaemonOptionsFrom(*parsed);
  if (!options.ok()) {
    std::cerr << options.status().message() << "\n";
    return loom::cli::kExitUsage;
  }
  FLAGS_minloglevel = options->verbose ? google::GLOG_INFO : google::GLOG_WARNING;

  // SIGTERM, SIGINT and SIGHUP are taken by sigwait below: blocked here, before any thread
  // starts, so that every thread inherits the mask and none is interrupted by them. SIGHUP (the
  // terminal closed; loomd has no configuration to reload) stops it too, as by default: left
  // alone it would go to UCX's handler (UCX_DEBUG_SIGNO), which turns UCX's log to its most
  // verbose level and leaves the daemon running.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<loom::daemon::Daemon>> daemon =
      loom::daemon::Daemon::Start(*options);
  if (!daemon.ok()) {
    std::cerr << "loomd: " << daemon.status().message() << "\n";
    return loom::cli::kExitFailure;
  }
  // Scripts read the address (and the port picked for port 0) from this line.
  std::cout << "loomd: node '" << options->node_name << "' listening on " << (*daemon)->address()
            << " (" << options->devices.ToString()
            << (options->tls.has_value() ? ", mutual TLS" : "") << ")" << std::endl;
  std::cout << "loomd: memory budget per device: " << (*daemon)->memory_budget().description
            << std::endl;
  std::cout << "loomd: host memory budget for offloaded activations: "
            << (*daemon)->host_memory_budget().description << std::endl;
  if (!(*daemon)->metrics_url().empty()) {
    std::cout << "loomd: metrics on " << (*daemon)->metrics_url() << std::endl;
  }
  if (!(*daemon)->health_address().empty()) {
    std::cout << "loomd: health checks (plaintext) on " << (*daemon)->health_address() << std::endl;
  }
  // Under systemd (Type=notify): ready, and watchdog pings while running. No-ops elsewhere.
  loom::daemon::SystemdNotifier systemd;
  if (absl::Status status = systemd.Ready(absl::StrCat("serving on ", (*daemon)->address()));
      !status.ok()) {
    LOG(WARNING) << status.message();
  }
  systemd.StartWatchdog();

  // Waits for a signal, telling systemd (STATUS=) whenever this node's health changes: a job's
  // part that does not end after its release makes it unhealthy (health NOT_SERVING too).
  int signal_number = -1;
  std::string health_said;  // what STATUS last said of the health; empty: healthy
  while (signal_number < 0) {
    const timespec second = {1, 0};
    signal_number = sigtimedwait(&signals, nullptr, &second);
    const absl::Status health = (*daemon)->node_health();
    const std::string said = health.ok() ? "" : std::string(health.message());
    if (said == health_said) continue;
    health_said = said;
    const std::string line = health.ok() ? absl::StrCat("serving on ", (*daemon)->address())
                                         : absl::StrCat("unhealthy: ", said);
    if (absl::Status status = systemd.SetStatus(line); !status.ok()) {
      LOG(WARNING) << status.message();
    }
  }
  std::cout << "loomd: SIG" << sigabbrev_np(signal_number) << ": shutting down" << std::endl;
  if (absl::Status status = systemd.Stopping(); !status.ok()) LOG(WARNING) << status.message();
  (*daemon)->Shutdown(options->shutdown_grace);
  if ((*daemon)->abandoned_threads()) {
    // A job's part that never ends still uses the daemon: exit without destroying it (or waiting
    // for those threads). Shutdown logged what was abandoned.
    std::cout << "loomd: stopped, abandoning a job's part that did not end" << std::endl;
    std::_Exit(loom::cli::kExitSuccess);
  }
  daemon->reset();
  std::cout << "loomd: stopped" << std::endl;
  return loom::cli::kExitSuccess;
}
