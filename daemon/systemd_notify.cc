#include "daemon/systemd_notify.h"

#include <systemd/sd-daemon.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace loom::daemon {
namespace {

// sd_notify(state): OK when sent or when there is no systemd to send it to.
absl::Status Notify(const std::string& state) {
  const int result = sd_notify(/*unset_environment=*/0, state.c_str());
  if (result < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot notify systemd ('", state, "'): ", std::strerror(-result)));
  }
  return absl::OkStatus();
}

}  // namespace

SystemdNotifier::~SystemdNotifier() { StopWatchdog(); }

bool SystemdNotifier::Enabled() {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && socket[0] != '\0';
}

absl::Status SystemdNotifier::Ready(absl::string_view status) {
  return Notify(absl::StrCat("READY=1\nSTATUS=", status));
}

absl::Status SystemdNotifier::SetStatus(absl::string_view status) {
  return Notify(absl::StrCat("STATUS=", status));
}

absl::Status SystemdNotifier::Stopping() { return Notify("STOPPING=1\nSTATUS=shutting down"); }

void SystemdNotifier::StartWatchdog() {
  if (watchdog_thread_.joinable() || !Enabled()) return;
  uint64_t interval_microseconds = 0;
  // > 0 only when WATCHDOG_USEC is set and WATCHDOG_PID, if set, is this process.
  const int enabled = sd_watchdog_enabled(/*unset_environment=*/0, &interval_microseconds);
  if (enabled < 0) {
    LOG(WARNING) << "systemd watchdog settings are malformed, no watchdog pings: "
                 << std::strerror(-enabled);
    return;
  }
  if (enabled == 0 || interval_microseconds == 0) return;
  watchdog_period_ = std::chrono::microseconds(interval_microseconds / 2);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = false;
  }
  LOG(INFO) << "systemd watchdog: WATCHDOG=1 every " << watchdog_period_.count() << " us";
  watchdog_thread_ = std::thread([this] { WatchdogLoop(); });
}

void SystemdNotifier::StopWatchdog() {
  if (!watchdog_thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_requested_.notify_all();
  watchdog_thread_.join();
  watchdog_period_ = std::chrono::microseconds(0);
}

void SystemdNotifier::WatchdogLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stopping_) {
    if (absl::Status status = Notify("WATCHDOG=1"); !status.ok()) {
      LOG(WARNING) << status.message();
    }
    stop_requested_.wait_for(lock, watchdog_period_, [this] { return stopping_; });
  }
}

}  // namespace loom::daemon
