#ifndef LOOM_DAEMON_HOST_PORT_H_
#define LOOM_DAEMON_HOST_PORT_H_

// WithPort: a listen address with the port a server bound, for servers started on port 0. The
// Daemon (its gRPC and health servers) and the MetricsServer make the addresses they report with
// it.

#include <string>

namespace loom::daemon {

// "127.0.0.1:0" with port 7071 -> "127.0.0.1:7071" (the address a server bound to port 0 got).
std::string WithPort(const std::string& address, int port);

}  // namespace loom::daemon

#endif  // LOOM_DAEMON_HOST_PORT_H_
