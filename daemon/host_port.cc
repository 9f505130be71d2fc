#include "daemon/host_port.h"

#include "absl/strings/str_cat.h"

namespace loom::daemon {

std::string WithPort(const std::string& address, int port) {
  return absl::StrCat(address.substr(0, address.rfind(':')), ":", port);
}

}  // namespace loom::daemon
