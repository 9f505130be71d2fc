// The pieces of same-host copies: addresses, the transport list, reading another process.
#include "transport/same_host.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_util.h"

namespace loom::transport {
namespace {

using ::testing::HasSubstr;

TEST(SameHostTest, AddressesCarryTheIdentityAndTheWorkerAddress) {
  uint64_t probe = 0x1234567890abcdefull;
  ProcessIdentity identity = IdentifyThisProcess(&probe);
  EXPECT_EQ(identity.pid, getpid());
  EXPECT_FALSE(identity.host.empty());
  EXPECT_EQ(identity.mailbox_descriptor, -1);
  identity.mailbox_descriptor = 17;
  identity.wake_descriptor = 18;
  std::string worker_address("\0ucx\xff worker", 12);
  absl::StatusOr<DecodedAddress> decoded = DecodeAddress(EncodeAddress(identity, worker_address));
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(decoded->worker_address, worker_address);
  EXPECT_EQ(decoded->identity.host, identity.host);
  EXPECT_EQ(decoded->identity.pid, identity.pid);
  EXPECT_EQ(decoded->identity.probe_address, reinterpret_cast<uintptr_t>(&probe));
  EXPECT_EQ(decoded->identity.probe_value, probe);
  EXPECT_EQ(decoded->identity.mailbox_descriptor, 17);
  EXPECT_EQ(decoded->identity.wake_descriptor, 18);
}

TEST(SameHostTest, ForeignOrTruncatedAddressesAreRejected) {
  EXPECT_EQ(DecodeAddress("short").status().code(), absl::StatusCode::kInvalidArgument);
  absl::StatusOr<DecodedAddress> foreign = DecodeAddress(std::string(64, 'x'));
  ASSERT_FALSE(foreign.ok());
  EXPECT_THAT(foreign.status().message(), HasSubstr("not a Loom transport address"));
  uint64_t probe = 1;
  std::string address = EncodeAddress(IdentifyThisProcess(&probe), "");
  address.resize(address.size() - 3);  // into the host id
  absl::StatusOr<DecodedAddress> truncated = DecodeAddress(address);
  ASSERT_FALSE(truncated.ok());
  EXPECT_THAT(truncated.status().message(), HasSubstr("truncated"));
}

TEST(SameHostTest, TheTransportListDecidesAsUcxWould) {
  EXPECT_TRUE(TransportListAllowsSameHostCopies("all"));
  EXPECT_TRUE(TransportListAllowsSameHostCopies("tcp,cma"));
  EXPECT_TRUE(TransportListAllowsSameHostCopies("sm,self"));
  EXPECT_TRUE(TransportListAllowsSameHostCopies(" shm "));
  EXPECT_TRUE(TransportListAllowsSameHostCopies("^ib"));
  EXPECT_FALSE(TransportListAllowsSameHostCopies("tcp"));
  EXPECT_FALSE(TransportListAllowsSameHostCopies("tcp,self"));
  EXPECT_FALSE(TransportListAllowsSameHostCopies("^cma"));
  EXPECT_FALSE(TransportListAllowsSameHostCopies("^sm,ib"));
  EXPECT_FALSE(TransportListAllowsSameHostCopies(""));
}

TEST(SameHostTest, ReadsAProcessThatPublishedItsProbe) {
  const std::string unavailable = testing::SameHostCopiesUnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  uint64_t probe = 0x5eed5eed5eed5eedull;
  ProcessIdentity self = IdentifyThisProcess(&probe);
  absl::StatusOr<std::unique_ptr<ProcessReader>> reader = ProcessReader::Open(self, self);
  ASSERT_TRUE(reader.ok()) << reader.status();
  std::vector<uint32_t> source(1 << 20);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<uint32_t>(i * 2654435761u);
  std::vector<uint32_t> destination(source.size());
  ASSERT_TRUE((*reader)
                  ->Read(reinterpret_cast<uintptr_t>(source.data()), destination.data(),
                         source.size() * sizeof(uint32_t))
                  .ok());
  EXPECT_EQ(source, destination);
}

TEST(SameHostTest, RefusesAnotherHostOrAStaleProbe) {
  uint64_t probe = 77;
  ProcessIdentity self = IdentifyThisProcess(&probe);
  ProcessIdentity elsewhere = self;
  elsewhere.host = "another-boot-id/pid:1";
  EXPECT_EQ(ProcessReader::Open(elsewhere, self).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ProcessIdentity unknown = self;
  unknown.host.clear();
  EXPECT_EQ(ProcessReader::Open(unknown, unknown).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const std::string unavailable = testing::SameHostCopiesUnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  ProcessIdentity stale = self;
  stale.probe_value = 78;  // another process now has this pid, or the word changed
  absl::StatusOr<std::unique_ptr<ProcessReader>> reader = ProcessReader::Open(stale, self);
  ASSERT_FALSE(reader.ok());
  EXPECT_THAT(reader.status().message(), HasSubstr("probe word differs"));
}

TEST(SameHostTest, AnExitedProcessIsUnavailable) {
  const std::string unavailable = testing::SameHostCopiesUnavailableReason();
  if (!unavailable.empty()) GTEST_SKIP() << unavailable;
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  static uint64_t child_probe = 0;  // the same address in the forked child
  child_probe = 0xc41dull;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  close(ready[0]);
  uint64_t own_probe = 0;
  ProcessIdentity self = IdentifyThisProcess(&own_probe);
  ProcessIdentity identity = self;
  identity.pid = child;
  identity.probe_address = reinterpret_cast<uintptr_t>(&child_probe);
  identity.probe_value = child_probe;
  absl::StatusOr<std::unique_ptr<ProcessReader>> reader = ProcessReader::Open(identity, self);
  ASSERT_TRUE(reader.ok()) << reader.status();

  ASSERT_EQ(kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  uint64_t value = 0;
  absl::Status read = (*reader)->Read(identity.probe_address, &value, sizeof(value));
  EXPECT_EQ(read.code(), absl::StatusCode::kUnavailable) << read;
  EXPECT_THAT(read.message(), HasSubstr(absl::StrCat("process ", child)));
}

}  // namespace
}  // namespace loom::transport
