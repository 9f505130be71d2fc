#include "daemon/metrics_server.h"

#include <sys/socket.h>

#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "daemon/host_port.h"
#include "httplib.h"
#include "prometheus/metric_family.h"
#include "prometheus/text_serializer.h"

namespace loom::daemon {
namespace {

// The Prometheus text exposition format.
constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// Scrapes come one at a time per Prometheus; the second thread serves a person's curl meanwhile.
constexpr int kServerThreads = 2;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& address, std::vector<std::weak_ptr<prometheus::Collectable>> collectables,
    const std::optional<TlsCredentials>& tls) {
  const size_t colon = address.rfind(':');
  int port = 0;
  if (colon == std::string::npos || !absl::SimpleAtoi(address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics address '", address, "' is not HOST:PORT"));
  }
  std::string host = address.substr(0, colon);
  // "[::]:9400" -> "::".
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->collectables_ = std::move(collectables);
  if (tls.has_value()) {
    absl::Status configured;
    auto https = std::make_unique<httplib::SSLServer>([&](SSL_CTX& context) {
      configured = ConfigureMutualTlsServer(*tls, &context);
      return configured.ok();
    });
    if (!https->is_valid()) {
      return absl::Status(
          configured.ok() ? absl::StatusCode::kInternal : configured.code(),
          absl::StrCat("cannot serve metrics on '", address, "' over HTTPS: ",
                       configured.ok() ? "OpenSSL made no TLS context" : configured.message()));
    }
    server->server_ = std::move(https);
    server->tls_ = true;
  } else {
    server->server_ = std::make_unique<httplib::Server>();
  }
  server->server_->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  // httplib's default also sets SO_REUSEPORT, with which a second daemon would silently share
  // the port: only SO_REUSEADDR (restarts do not wait for TIME_WAIT).
  server->server_->set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  MetricsServer* self = server.get();
  server->server_->Get("/metrics", [self](const httplib::Request&, httplib::Response& response) {
    response.set_content(self->Render(), kContentType);
  });
  server->server_->Get("/", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("loomd: metrics at /metrics\n", "text/plain");
  });
  if (port == 0) {
    port = server->server_->bind_to_any_port(host);
  } else if (!server->server_->bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on '", address,
                                               "': the address is in use or not local"));
  }
  server->port_ = port;
  server->address_ = WithPort(address, port);
  server->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  // httplib's stop() does nothing before the server runs: wait for it, so that the destructor
  // always ends it.
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (!server->server_->is_running()) {
    if (absl::Now() > deadline) {
      return absl::UnavailableError(
          absl::StrCat("the metrics server on '", address, "' did not start in 10 s"));
    }
    absl::SleepFor(absl::Milliseconds(1));
  }
  return server;
}

std::string MetricsServer::url() const {
  return absl::StrCat(tls_ ? "https" : "http", "://", address_, "/metrics");
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::Render() const {
  std::vector<prometheus::MetricFamily> families;
  for (const auto& weak : collectables_) {
    if (std::shared_ptr<prometheus::Collectable> collectable = weak.lock()) {
      for (prometheus::MetricFamily& family : collectable->Collect()) {
        families.push_back(std::move(family));
      }
    }
  }
  return prometheus::TextSerializer().Serialize(families);
}

}  // namespace loom::daemon
