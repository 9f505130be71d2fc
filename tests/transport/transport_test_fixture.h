#ifndef LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_FIXTURE_H_
#define LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_FIXTURE_H_

// The fixture of the Transport's in-process tests (transport_test.cc, transport_drive_test.cc):
// two or three Transports in one process, each connected to every other one over TCP loopback,
// on either data path (UCX alone, or with same-host copies), and the deadline their waits use.
// Each test binary instantiates the suite over both paths with DataPathName.

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_util.h"
#include "transport/transport.h"

namespace loom::transport::testing {

inline constexpr absl::Duration kDeadline = absl::Seconds(10);

// Every test runs on both data paths: UCX over TCP, and same-host copies (the transports of one
// process are on one host).
class TransportTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    UseTcpTransports();
    if (same_host_copies()) {
      const std::string unavailable = SameHostCopiesUnavailableReason();
      if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    }
  }

  bool same_host_copies() const { return GetParam(); }

  // Creates transports 0..count-1, each connected to every other one.
  void Connect(int count) {
    inboxes_.resize(count);
    for (int i = 0; i < count; ++i) {
      inboxes_[i] = std::make_unique<Inbox>();
      absl::StatusOr<std::unique_ptr<Transport>> transport =
          MakeTransport(i, inboxes_[i].get(), same_host_copies() ? kTcpAndSameHostCopies : kTcpOnly,
                        copy_min_bytes_, park_timeout_);
      ASSERT_TRUE(transport.ok()) << transport.status();
      transports_.push_back(*std::move(transport));
    }
    for (int i = 0; i < count; ++i) {
      for (int j = 0; j < count; ++j) {
        if (i == j) continue;
        ASSERT_TRUE(transports_[i]->AddPeer(j, transports_[j]->address()).ok());
      }
    }
    const bool mailboxes = same_host_copies() && MailboxUnavailableReason().empty();
    for (int i = 0; i < count; ++i) {
      for (int j = 0; j < count; ++j) {
        if (i == j) continue;
        if (same_host_copies()) {
          ASSERT_TRUE(WaitForSameHostCopies(*transports_[i], j, kDeadline))
              << "peer " << j << " never announced that it can read node " << i;
          EXPECT_EQ(transports_[i]->PostsToMailboxOf(j), mailboxes);
        } else {
          EXPECT_FALSE(transports_[i]->CopiesDirectlyTo(j));
          EXPECT_FALSE(transports_[i]->PostsToMailboxOf(j));
        }
      }
    }
  }

  size_t copy_min_bytes_ = 0;  // every transfer by copy, when copies are on
  absl::Duration park_timeout_ = TransportOptions().park_timeout;
  std::vector<std::unique_ptr<Inbox>> inboxes_;
  std::vector<std::unique_ptr<Transport>> transports_;
};

// The name of a TransportTest instance: its data path.
inline std::string DataPathName(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "SameHostCopies" : "Ucx";
}

}  // namespace loom::transport::testing

#endif  // LOOM_TESTS_TRANSPORT_TRANSPORT_TEST_FIXTURE_H_
