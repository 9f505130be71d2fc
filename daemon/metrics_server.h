#ifndef LOOM_DAEMON_METRICS_SERVER_H_
#define LOOM_DAEMON_METRICS_SERVER_H_

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace loom::daemon {

// Serves GET /metrics in the Prometheus text format for loomd's --metrics-listen: the metrics of
// the collectables (prometheus-cpp registries and ScrapeGauges), serialised by prometheus-cpp's
// TextSerializer, over cpp-httplib.
//
// Not prometheus-cpp's own Exposer: Debian 12 builds its CivetWeb with 100 KiB thread stacks, and
// in a process that loads libquadmath (OpenBLAS -> libgfortran does) glibc formats every printf
// through its slow positional path, which overflows those stacks as soon as a CivetWeb thread
// names itself: loomd crashed at start. docs/ARCHITECTURE.md, "Dependencies", says more.
class MetricsServer {
 public:
  // `address` is HOST:PORT (port 0 picks a free one). UNAVAILABLE naming the address when it
  // cannot be bound. The collectables are held weakly: their owners keep them alive while the
  // server runs.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::vector<std::weak_ptr<prometheus::Collectable>> collectables);
  // Stops serving (an in-flight scrape finishes first).
  ~MetricsServer();

  // The port it listens on, and HOST:PORT with it.
  int port() const { return port_; }
  const std::string& address() const { return address_; }

  // The text a scrape gets.
  std::string Render() const;

 private:
  MetricsServer() = default;

  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::string address_;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_METRICS_SERVER_H_
