#ifndef LOOM_DAEMON_METRICS_SERVER_H_
#define LOOM_DAEMON_METRICS_SERVER_H_

// MetricsServer: loomd's GET /metrics (--metrics-listen) in the Prometheus text format, over
// cpp-httplib, as plain HTTP or HTTPS with mutual TLS. It serves the collectables it is given: the
// Daemon passes DaemonMetrics' registry and its ScrapeGauges.

#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "prometheus/collectable.h"
#include "rpc/tls.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace loom::daemon {

// Serves GET /metrics in the Prometheus text format for loomd's --metrics-listen: the metrics of
// the collectables (prometheus-cpp registries and ScrapeGauges), serialised by prometheus-cpp's
// TextSerializer, over cpp-httplib: plain HTTP, or HTTPS with mutual TLS (a scraper must present
// a certificate of the daemon's authority, as every gRPC client must).
//
// Not prometheus-cpp's own Exposer, which crashed loomd at start. (Why: docs/ARCHITECTURE.md,
// "Dependencies and why", `/metrics` HTTP server.)
class MetricsServer {
 public:
  // `address` is HOST:PORT (port 0 picks a free one). HTTPS with `tls`, plain HTTP without.
  // UNAVAILABLE naming the address when it cannot be bound; INVALID_ARGUMENT when OpenSSL refuses
  // the credentials. The collectables are held weakly: their owners keep them alive while the
  // server runs.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& address, std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
      const std::optional<TlsCredentials>& tls = std::nullopt);
  // Stops serving (an in-flight scrape finishes first).
  ~MetricsServer();

  // The port it listens on, and HOST:PORT with it.
  int port() const { return port_; }
  const std::string& address() const { return address_; }
  // "https://HOST:PORT/metrics" or "http://HOST:PORT/metrics".
  std::string url() const;

  // The text a scrape gets.
  std::string Render() const;

 private:
  MetricsServer() = default;

  std::vector<std::weak_ptr<prometheus::Collectable>> collectables_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
  std::string address_;
  bool tls_ = false;
};

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_METRICS_SERVER_H_
