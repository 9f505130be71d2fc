#include "transport/same_host.h"

#include <poll.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/format_bytes.h"

namespace loom::transport {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'U', 'C', 'X', '2'};

// The fixed part of an encoded address; the host string and the worker address follow.
struct AddressPrefix {
  char magic[8];
  uint32_t pid;
  uint32_t host_length;
  uint64_t probe_address;
  uint64_t probe_value;
  int32_t mailbox_descriptor;
  int32_t wake_descriptor;
};

std::string ReadBootId() {
  std::ifstream file("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(file, id);
  return std::string(absl::StripAsciiWhitespace(id));
}

}  // namespace

ProcessIdentity IdentifyThisProcess(const uint64_t* probe) {
  ProcessIdentity identity;
  identity.pid = getpid();
  identity.probe_address = reinterpret_cast<uintptr_t>(probe);
  identity.probe_value = *probe;
  struct stat namespace_stat {};
  std::string boot_id = ReadBootId();
  if (!boot_id.empty() && stat("/proc/self/ns/pid", &namespace_stat) == 0) {
    identity.host = absl::StrCat(boot_id, "/pid:", namespace_stat.st_ino);
  }
  return identity;
}

std::string EncodeAddress(const ProcessIdentity& identity, absl::string_view worker_address) {
  AddressPrefix prefix{};
  std::memcpy(prefix.magic, kMagic, sizeof(kMagic));
  prefix.pid = static_cast<uint32_t>(identity.pid);
  prefix.host_length = static_cast<uint32_t>(identity.host.size());
  prefix.probe_address = identity.probe_address;
  prefix.probe_value = identity.probe_value;
  prefix.mailbox_descriptor = identity.mailbox_descriptor;
  prefix.wake_descriptor = identity.wake_descriptor;
  std::string address(reinterpret_cast<const char*>(&prefix), sizeof(prefix));
  absl::StrAppend(&address, identity.host, worker_address);
  return address;
}

absl::StatusOr<DecodedAddress> DecodeAddress(absl::string_view address) {
  AddressPrefix prefix{};
  if (address.size() < sizeof(prefix)) {
    return absl::InvalidArgumentError(absl::StrCat("a transport address of ", address.size(),
                                                   " bytes is too short to be one (at least ",
                                                   sizeof(prefix), " expected)"));
  }
  std::memcpy(&prefix, address.data(), sizeof(prefix));
  if (std::memcmp(prefix.magic, kMagic, sizeof(kMagic)) != 0) {
    return absl::InvalidArgumentError(
        "not a Loom transport address (it must come from the peer's Transport::address())");
  }
  address.remove_prefix(sizeof(prefix));
  if (prefix.host_length > address.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a transport address is truncated: its host id ",
                                                   "claims ", prefix.host_length, " bytes, ",
                                                   address.size(), " are left"));
  }
  DecodedAddress decoded;
  decoded.identity.pid = static_cast<pid_t>(prefix.pid);
  decoded.identity.probe_address = prefix.probe_address;
  decoded.identity.probe_value = prefix.probe_value;
  decoded.identity.mailbox_descriptor = prefix.mailbox_descriptor;
  decoded.identity.wake_descriptor = prefix.wake_descriptor;
  decoded.identity.host = std::string(address.substr(0, prefix.host_length));
  decoded.worker_address = std::string(address.substr(prefix.host_length));
  return decoded;
}

bool TransportListAllowsSameHostCopies(absl::string_view transports) {
  transports = absl::StripAsciiWhitespace(transports);
  bool excluding = absl::ConsumePrefix(&transports, "^");
  bool named = false;
  for (absl::string_view name : absl::StrSplit(transports, ',')) {
    name = absl::StripAsciiWhitespace(name);
    if (name == "cma" || name == "sm" || name == "shm" || name == "all") named = true;
  }
  return excluding ? !named : named;
}

absl::StatusOr<std::unique_ptr<ProcessReader>> ProcessReader::Open(const ProcessIdentity& identity,
                                                                   const ProcessIdentity& self) {
  if (identity.host.empty() || identity.host != self.host) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", identity.pid, " is on another host or in another pid namespace"));
  }
  // Through syscall(): glibc 2.36 declares pidfd_open without C linkage for C++.
  int pidfd = static_cast<int>(syscall(SYS_pidfd_open, identity.pid, 0));
  if (pidfd < 0) {
    return absl::UnavailableError(
        absl::StrCat("opening process ", identity.pid, ": ", std::strerror(errno)));
  }
  auto reader = std::unique_ptr<ProcessReader>(new ProcessReader(identity.pid, pidfd));
  uint64_t probe = 0;
  absl::Status read = reader->Read(identity.probe_address, &probe, sizeof(probe));
  if (!read.ok()) return read;
  if (probe != identity.probe_value) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", identity.pid, " is not the one that published the address (its ",
                     "probe word differs)"));
  }
  return reader;
}

ProcessReader::~ProcessReader() { close(pidfd_); }

bool ProcessReader::Exited() const {
  pollfd descriptor{pidfd_, POLLIN, 0};
  return poll(&descriptor, 1, /*timeout=*/0) > 0;
}

absl::StatusOr<int> ProcessReader::DuplicateDescriptor(int descriptor) const {
  int duplicate = static_cast<int>(syscall(SYS_pidfd_getfd, pidfd_, descriptor, 0));
  if (duplicate < 0) {
    int error = errno;
    std::string what = absl::StrCat("taking descriptor ", descriptor, " of process ", pid_,
                                    " (pidfd_getfd): ", std::strerror(error));
    if (error == ESRCH) return absl::UnavailableError(what);
    if (error == EPERM) return absl::PermissionDeniedError(what);
    return absl::InternalError(what);
  }
  return duplicate;
}

absl::Status ProcessReader::Read(uint64_t address, void* destination, size_t size) const {
  size_t done = 0;
  while (done < size) {
    iovec local{static_cast<char*>(destination) + done, size - done};
    iovec remote{reinterpret_cast<void*>(address + done), size - done};
    ssize_t copied = process_vm_readv(pid_, &local, 1, &remote, 1, 0);
    if (copied < 0) {
      if (errno == EINTR) continue;
      int error = errno;
      std::string what = absl::StrCat("reading ", FormatBytes(size), " from process ", pid_, ": ",
                                      std::strerror(error));
      if (error == ESRCH) return absl::UnavailableError(what);
      if (error == EPERM) return absl::PermissionDeniedError(what);
      return absl::InternalError(what);
    }
    if (copied == 0) {
      return absl::InternalError(absl::StrCat("reading ", FormatBytes(size), " from process ", pid_,
                                              ": no progress after ", done, " bytes"));
    }
    done += static_cast<size_t>(copied);
  }
  // A process id is not reused while its process exists (a zombie included), and the pidfd
  // reports the exit: if the process had not exited after the copy, the bytes came from it.
  if (Exited()) {
    return absl::UnavailableError(
        absl::StrCat("process ", pid_, " exited while ", FormatBytes(size), " were read from it"));
  }
  return absl::OkStatus();
}

}  // namespace loom::transport
