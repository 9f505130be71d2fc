// The same-host mailbox: messages posted by peers, in order per sender, whole whatever the number
// of records they take, never blocking, and the wake-up of a parked owner; within this process
// and from a forked child; records no sender would write (written into the mailbox's memory
// directly) dropped without losing the messages around them.
#include "transport/same_host_mailbox.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/transport/transport_test_util.h"
#include "transport/same_host_mailbox_layout.h"

namespace loom::transport {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;

using Records = std::vector<std::pair<uint32_t, std::string>>;

Records ReceiveAll(Mailbox& mailbox) {
  Records records;
  mailbox.Receive([&](uint32_t sender, absl::string_view bytes) {
    records.emplace_back(sender, std::string(bytes));
  });
  return records;
}

bool Readable(int descriptor) {
  pollfd entry{descriptor, POLLIN, 0};
  return poll(&entry, 1, /*timeout=*/0) == 1;
}

// A mailbox of this process and senders into it (through this process's own pidfd).
class MailboxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string unavailable = testing::SameHostCopiesUnavailableReason();
    if (unavailable.empty()) unavailable = testing::MailboxUnavailableReason();
    if (!unavailable.empty()) GTEST_SKIP() << unavailable;
    wake_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ASSERT_GE(wake_, 0);
    absl::StatusOr<std::unique_ptr<Mailbox>> mailbox = Mailbox::Create(wake_);
    ASSERT_TRUE(mailbox.ok()) << mailbox.status();
    mailbox_ = *std::move(mailbox);
    identity_ = IdentifyThisProcess(&probe_);
    identity_.mailbox_descriptor = mailbox_->descriptor();
    identity_.wake_descriptor = mailbox_->wake_descriptor();
    absl::StatusOr<std::unique_ptr<ProcessReader>> reader =
        ProcessReader::Open(identity_, identity_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    reader_ = *std::move(reader);
  }
  void TearDown() override {
    if (wake_ >= 0) close(wake_);
  }

  std::unique_ptr<MailboxSender> Sender(uint32_t sender) {
    absl::StatusOr<std::unique_ptr<MailboxSender>> opened =
        MailboxSender::Open(*reader_, identity_, sender);
    EXPECT_TRUE(opened.ok()) << opened.status();
    return opened.ok() ? *std::move(opened) : nullptr;
  }

  uint64_t probe_ = 0x600d600d600d600dull;
  int wake_ = -1;
  std::unique_ptr<Mailbox> mailbox_;
  ProcessIdentity identity_;
  std::unique_ptr<ProcessReader> reader_;
};

// A message of `length` bytes that differ from record to record.
std::string Message(size_t length, char first) {
  std::string message(length, ' ');
  for (size_t i = 0; i < length; ++i) message[i] = static_cast<char>(first + i % 61);
  return message;
}

TEST_F(MailboxTest, MessagesArriveWholeAndInOrderPerSender) {
  std::unique_ptr<MailboxSender> three = Sender(3);
  std::unique_ptr<MailboxSender> seven = Sender(7);
  ASSERT_NE(three, nullptr);
  ASSERT_NE(seven, nullptr);
  EXPECT_FALSE(mailbox_->HasRecords());
  EXPECT_TRUE(three->Post("a"));
  EXPECT_TRUE(seven->Post(Message(Mailbox::kRecordBytes, 'x')));
  EXPECT_TRUE(three->Post(""));
  EXPECT_TRUE(three->Post(Message(Mailbox::kMaxMessageBytes, 'b')));  // many records
  EXPECT_TRUE(seven->Post(Message(Mailbox::kRecordBytes + 1, 'y')));  // two
  EXPECT_TRUE(three->Post("c"));
  EXPECT_TRUE(mailbox_->HasRecords());
  Records records = ReceiveAll(*mailbox_);
  // Slots are read in the order they were claimed.
  EXPECT_THAT(records, ElementsAre(Pair(3, "a"), Pair(3, ""),
                                   Pair(3, Message(Mailbox::kMaxMessageBytes, 'b')), Pair(3, "c"),
                                   Pair(7, Message(Mailbox::kRecordBytes, 'x')),
                                   Pair(7, Message(Mailbox::kRecordBytes + 1, 'y'))));
  EXPECT_FALSE(mailbox_->HasRecords());
  EXPECT_TRUE(ReceiveAll(*mailbox_).empty());
}

TEST_F(MailboxTest, AFullRingRefusesWithoutLosingAnythingAndWrapsAround) {
  std::unique_ptr<MailboxSender> sender = Sender(1);
  ASSERT_NE(sender, nullptr);
  int posted = 0;
  for (int lap = 0; lap < 5; ++lap) {
    const int first = posted;
    while (sender->Post(absl::StrCat(posted))) ++posted;
    EXPECT_EQ(posted - first, Mailbox::kRecordsPerSlot) << "lap " << lap;
    Records records = ReceiveAll(*mailbox_);
    ASSERT_EQ(records.size(), static_cast<size_t>(Mailbox::kRecordsPerSlot));
    for (int i = 0; i < Mailbox::kRecordsPerSlot; ++i) {
      EXPECT_EQ(records[i].second, absl::StrCat(first + i));
    }
  }
}

TEST_F(MailboxTest, AMessageWithoutRoomIsRefusedWholeAndPostedOnceThereIsRoom) {
  std::unique_ptr<MailboxSender> sender = Sender(1);
  ASSERT_NE(sender, nullptr);
  // Messages of three records until the ring has less than three left.
  const std::string message = Message(2 * Mailbox::kRecordBytes + 1, 'm');
  int posted = 0;
  while (sender->Post(message)) ++posted;
  EXPECT_EQ(posted, Mailbox::kRecordsPerSlot / 3);
  // What is left still takes a one-record message, not a three-record one.
  const bool room_for_one = Mailbox::kRecordsPerSlot % 3 != 0;
  EXPECT_EQ(sender->Post("1"), room_for_one);
  EXPECT_FALSE(sender->Post(message));
  Records records = ReceiveAll(*mailbox_);
  ASSERT_EQ(records.size(), static_cast<size_t>(posted + (room_for_one ? 1 : 0)));
  for (int i = 0; i < posted; ++i) EXPECT_EQ(records[i].second, message) << "message " << i;
  // Drained: across the ring's end, and whole.
  EXPECT_TRUE(sender->Post(message));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(1, message)));
}

TEST_F(MailboxTest, AMessageTooLargeIsRefused) {
  std::unique_ptr<MailboxSender> sender = Sender(1);
  ASSERT_NE(sender, nullptr);
  EXPECT_FALSE(sender->Post(std::string(Mailbox::kMaxMessageBytes + 1, 'y')));
  EXPECT_FALSE(mailbox_->HasRecords());
}

TEST_F(MailboxTest, SendersBeyondTheSlotsAreRefused) {
  std::vector<std::unique_ptr<MailboxSender>> senders;
  for (int i = 0; i < Mailbox::kSlots; ++i) {
    senders.push_back(Sender(i));
    ASSERT_NE(senders.back(), nullptr);
  }
  absl::StatusOr<std::unique_ptr<MailboxSender>> refused =
      MailboxSender::Open(*reader_, identity_, 999);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("no free slot"));
  // The last slot still works.
  EXPECT_TRUE(senders.back()->Post("last"));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(Mailbox::kSlots - 1, "last")));
}

TEST_F(MailboxTest, AnIdentityWithoutAMailboxIsRefused) {
  ProcessIdentity none = identity_;
  none.mailbox_descriptor = -1;
  EXPECT_EQ(MailboxSender::Open(*reader_, none, 1).status().code(),
            absl::StatusCode::kFailedPrecondition);
  ProcessIdentity not_a_mailbox = identity_;
  not_a_mailbox.mailbox_descriptor = wake_;  // an eventfd: not a sealed memfd of the layout
  absl::Status status = MailboxSender::Open(*reader_, not_a_mailbox, 1).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.message(), HasSubstr("mailbox"));
}

TEST_F(MailboxTest, OnlyAParkedOwnerIsWoken) {
  std::unique_ptr<MailboxSender> sender = Sender(2);
  ASSERT_NE(sender, nullptr);
  EXPECT_TRUE(sender->Post("not parked"));
  EXPECT_FALSE(Readable(wake_)) << "a post to an owner that is not parked wrote the eventfd";
  // A record is waiting: the owner must not sleep.
  EXPECT_FALSE(mailbox_->BeginPark(Mailbox::Reader::kAnyThread));
  ReceiveAll(*mailbox_);
  ASSERT_TRUE(mailbox_->BeginPark(Mailbox::Reader::kAnyThread));
  EXPECT_TRUE(sender->Post("parked"));
  EXPECT_TRUE(Readable(wake_)) << "a post to a parked owner did not wake it";
  mailbox_->EndPark(Mailbox::Reader::kAnyThread);
  uint64_t count = 0;
  ASSERT_EQ(read(wake_, &count, sizeof(count)), static_cast<ssize_t>(sizeof(count)));
  EXPECT_EQ(count, 1u);
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(2, "parked")));
}

// A post for drivers wakes an owner thread parked as a driver, and no other: an idle progress
// thread sleeps through the messages of the transfers its node's ranks drive.
TEST_F(MailboxTest, APostForDriversWakesOnlyAThreadParkedAsADriver) {
  std::unique_ptr<MailboxSender> sender = Sender(2);
  ASSERT_NE(sender, nullptr);
  auto drain = [this] {
    uint64_t count = 0;
    return read(wake_, &count, sizeof(count)) == static_cast<ssize_t>(sizeof(count));
  };
  ASSERT_TRUE(mailbox_->BeginPark(Mailbox::Reader::kAnyThread));
  EXPECT_TRUE(sender->Post("for a driver", Mailbox::Reader::kDriver));
  EXPECT_FALSE(Readable(wake_)) << "a post for drivers woke a thread not parked as one";
  mailbox_->EndPark(Mailbox::Reader::kAnyThread);
  // Not lost: the next look finds it, and a thread parking now does not sleep over it.
  EXPECT_FALSE(mailbox_->BeginPark(Mailbox::Reader::kDriver));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(2, "for a driver")));

  ASSERT_TRUE(mailbox_->BeginPark(Mailbox::Reader::kDriver));
  EXPECT_TRUE(sender->Post("for a driver", Mailbox::Reader::kDriver));
  EXPECT_TRUE(Readable(wake_)) << "a post for drivers did not wake a parked driver";
  ASSERT_TRUE(drain());
  EXPECT_TRUE(sender->Post("for anyone"));
  EXPECT_TRUE(Readable(wake_)) << "a post for any thread did not wake a parked driver";
  mailbox_->EndPark(Mailbox::Reader::kDriver);
  ASSERT_TRUE(drain());
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(2, "for a driver"), Pair(2, "for anyone")));

  // Once the driver is up, a thread parked for any post is not woken by posts for drivers again.
  ASSERT_TRUE(mailbox_->BeginPark(Mailbox::Reader::kAnyThread));
  EXPECT_TRUE(sender->Post("late", Mailbox::Reader::kDriver));
  EXPECT_FALSE(Readable(wake_));
  mailbox_->EndPark(Mailbox::Reader::kAnyThread);
  ReceiveAll(*mailbox_);
}

// The mailbox's memory mapped once more, to write into a slot what a sender that broke the
// protocol (or memory gone bad) would: records appended at the slot's head, published together.
class RawSlot {
 public:
  RawSlot(int descriptor, int slot) : slot_(slot) {
    void* memory =
        mmap(nullptr, sizeof(MailboxLayout), PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0);
    EXPECT_NE(memory, MAP_FAILED) << std::strerror(errno);
    layout_ = memory == MAP_FAILED ? nullptr : static_cast<MailboxLayout*>(memory);
  }
  ~RawSlot() {
    if (layout_ != nullptr) munmap(layout_, sizeof(MailboxLayout));
  }
  RawSlot(const RawSlot&) = delete;
  RawSlot& operator=(const RawSlot&) = delete;

  bool mapped() const { return layout_ != nullptr; }
  MailboxLayout& layout() { return *layout_; }
  MailboxLayout::Slot& slot() { return layout_->slots[slot_]; }
  // A record claiming `length` bytes (at most kRecordBytes of them written).
  void Append(uint32_t length, bool continued) {
    const uint64_t head = slot().head.load() + appended_++;
    MailboxRecord& record = slot().records[head % Mailbox::kRecordsPerSlot];
    record.length = length;
    record.continued = continued ? 1 : 0;
    std::memset(record.bytes, 'r', sizeof(record.bytes));
  }
  void Publish() {
    slot().head.store(slot().head.load() + appended_);
    appended_ = 0;
  }

 private:
  const int slot_;
  MailboxLayout* layout_ = nullptr;
  uint64_t appended_ = 0;
};

TEST_F(MailboxTest, MalformedMessagesAreDroppedAndTheOnesAroundThemArrive) {
  std::unique_ptr<MailboxSender> broken = Sender(4);  // the first slot claimed: slot 0
  std::unique_ptr<MailboxSender> other = Sender(9);
  ASSERT_NE(broken, nullptr);
  ASSERT_NE(other, nullptr);
  RawSlot raw(mailbox_->descriptor(), 0);
  ASSERT_TRUE(raw.mapped());
  EXPECT_TRUE(broken->Post("before"));
  // A record longer than a record holds.
  raw.Append(Mailbox::kRecordBytes + 1, /*continued=*/false);
  raw.Publish();
  EXPECT_TRUE(broken->Post("between"));
  // Full records continued past the longest message.
  const int too_many = static_cast<int>(Mailbox::kMaxMessageBytes / Mailbox::kRecordBytes) + 2;
  for (int i = 0; i < too_many; ++i) raw.Append(Mailbox::kRecordBytes, i + 1 < too_many);
  raw.Publish();
  EXPECT_TRUE(broken->Post("after"));
  EXPECT_TRUE(other->Post("other"));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(4, "before"), Pair(4, "between"),
                                                 Pair(4, "after"), Pair(9, "other")));
  EXPECT_FALSE(mailbox_->HasRecords());
}

TEST_F(MailboxTest, AMessageCutShortIsDroppedAndTheNextOneArrives) {
  std::unique_ptr<MailboxSender> sender = Sender(2);
  ASSERT_NE(sender, nullptr);
  RawSlot raw(mailbox_->descriptor(), 0);
  ASSERT_TRUE(raw.mapped());
  EXPECT_TRUE(sender->Post("whole"));
  // Published, yet its last record says another follows.
  raw.Append(Mailbox::kRecordBytes, /*continued=*/true);
  raw.Append(3, /*continued=*/true);
  raw.Publish();
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(2, "whole")));
  EXPECT_FALSE(mailbox_->HasRecords());
  EXPECT_TRUE(sender->Post("next"));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(2, "next")));
}

TEST_F(MailboxTest, CountersThatMakeNoSenseAreDroppedAndTheSlotWorksOnAfterwards) {
  std::unique_ptr<MailboxSender> sender = Sender(6);
  ASSERT_NE(sender, nullptr);
  RawSlot raw(mailbox_->descriptor(), 0);
  ASSERT_TRUE(raw.mapped());
  // A head more than a ring ahead of the tail, and more slots claimed than there are.
  raw.slot().head.store(raw.slot().tail.load() + Mailbox::kRecordsPerSlot + 5);
  raw.layout().claimed.store(Mailbox::kSlots + 1000);
  EXPECT_TRUE(mailbox_->HasRecords());
  EXPECT_TRUE(ReceiveAll(*mailbox_).empty());
  EXPECT_FALSE(mailbox_->HasRecords());
  EXPECT_TRUE(sender->Post("fine"));
  EXPECT_THAT(ReceiveAll(*mailbox_), ElementsAre(Pair(6, "fine")));
}

TEST_F(MailboxTest, EachMalformedMessageIsReportedNamingItsSender) {
  std::unique_ptr<MailboxSender> sender = Sender(7);
  ASSERT_NE(sender, nullptr);
  RawSlot raw(mailbox_->descriptor(), 0);
  ASSERT_TRUE(raw.mapped());
  raw.Append(Mailbox::kRecordBytes + 1, /*continued=*/false);  // a record too long
  raw.Publish();
  EXPECT_TRUE(sender->Post("fine"));
  raw.Append(3, /*continued=*/true);  // cut short
  raw.Publish();
  Records records;
  std::vector<std::pair<uint32_t, std::string>> reports;
  mailbox_->Receive(
      [&](uint32_t from, absl::string_view bytes) { records.emplace_back(from, bytes); },
      [&](uint32_t from, absl::string_view what) { reports.emplace_back(from, what); });
  EXPECT_THAT(records, ElementsAre(Pair(7, "fine")));
  EXPECT_THAT(reports, ElementsAre(Pair(7, HasSubstr("too long")), Pair(7, HasSubstr("cut short"))));
  // Counters that make no sense are reported too.
  raw.slot().head.store(raw.slot().tail.load() + Mailbox::kRecordsPerSlot + 5);
  reports.clear();
  mailbox_->Receive([&](uint32_t, absl::string_view) {},
                    [&](uint32_t from, absl::string_view what) { reports.emplace_back(from, what); });
  EXPECT_THAT(reports, ElementsAre(Pair(7, HasSubstr("records where it has room for"))));
}

// The owner in a forked child; this process posts into it (a parent may always read its child
// where a child reading its parent may be refused by the ptrace policy).
TEST_F(MailboxTest, ADifferentProcessPostsAndWakesTheOwner) {
  int to_parent[2];
  ASSERT_EQ(pipe(to_parent), 0);
  static uint64_t child_probe = 0;  // the same address in the child
  child_probe = 0xc41d0c41dull;
  constexpr int kRecords = 1000;
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    int wake = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    absl::StatusOr<std::unique_ptr<Mailbox>> mailbox = Mailbox::Create(wake);
    if (wake < 0 || !mailbox.ok()) _exit(2);
    int descriptors[2] = {(*mailbox)->descriptor(), wake};
    if (write(to_parent[1], descriptors, sizeof(descriptors)) != sizeof(descriptors)) _exit(3);
    // Receives kRecords numbered records, sleeping on the eventfd whenever none is waiting.
    int expected = 0;
    bool in_order = true;
    while (expected < kRecords) {
      bool any = (*mailbox)->Receive([&](uint32_t sender, absl::string_view bytes) {
        in_order = in_order && sender == 5 && bytes == absl::StrCat(expected);
        ++expected;
      });
      if (any || !(*mailbox)->BeginPark(Mailbox::Reader::kAnyThread)) continue;
      pollfd entry{wake, POLLIN, 0};
      if (poll(&entry, 1, /*timeout=*/10000) != 1) _exit(4);  // never woken
      (*mailbox)->EndPark(Mailbox::Reader::kAnyThread);
      uint64_t count;
      while (read(wake, &count, sizeof(count)) > 0) {
      }
    }
    char verdict = in_order ? 'y' : 'n';
    if (write(to_parent[1], &verdict, 1) != 1) _exit(5);
    _exit(0);
  }
  close(to_parent[1]);
  int descriptors[2] = {-1, -1};
  ASSERT_EQ(read(to_parent[0], descriptors, sizeof(descriptors)),
            static_cast<ssize_t>(sizeof(descriptors)));
  ProcessIdentity identity = IdentifyThisProcess(&probe_);
  identity.pid = child;
  identity.probe_address = reinterpret_cast<uintptr_t>(&child_probe);
  identity.probe_value = child_probe;
  identity.mailbox_descriptor = descriptors[0];
  identity.wake_descriptor = descriptors[1];
  absl::StatusOr<std::unique_ptr<ProcessReader>> reader = ProcessReader::Open(identity, identity_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  absl::StatusOr<std::unique_ptr<MailboxSender>> sender =
      MailboxSender::Open(**reader, identity, 5);
  ASSERT_TRUE(sender.ok()) << sender.status();
  for (int i = 0; i < kRecords; ++i) {
    // A full ring is the caller's to retry (the Transport sends over UCX instead).
    while (!(*sender)->Post(absl::StrCat(i))) usleep(100);
    if (i % 50 == 0) usleep(1000);  // let the child park now and then
  }
  char verdict = 0;
  ASSERT_EQ(read(to_parent[0], &verdict, 1), 1);
  EXPECT_EQ(verdict, 'y') << "the child received the records out of order or from another sender";
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  close(to_parent[0]);
}

}  // namespace
}  // namespace loom::transport
