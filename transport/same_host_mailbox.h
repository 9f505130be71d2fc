#ifndef LOOM_TRANSPORT_SAME_HOST_MAILBOX_H_
#define LOOM_TRANSPORT_SAME_HOST_MAILBOX_H_

// Same-host mailboxes: Mailbox (a process's inbox in shared memory, a sealed memfd of per-sender
// rings, woken through an eventfd) and MailboxSender (a peer's mailbox mapped into this process,
// with the slot it posts in). A Transport sends the messages of same-host copies this way where the
// peer has a mailbox, instead of over UCX.

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "transport/same_host.h"

namespace loom::transport {

struct MailboxLayout;  // transport/same_host_mailbox_layout.h

// Small messages between Transports of one host through shared memory: what a same-host copy's
// announcement and answer travel by (transport/README.md, same-host copies), instead of an active
// message over TCP loopback. Posting is a store into the receiver's memory; the receiver finds
// the message at its next round of work, and a receiver asleep is woken through its wake-up
// eventfd. (Why, and what it saves: docs/ARCHITECTURE.md, "Registers across nodes", the
// mailbox; docs/PERFORMANCE.md, alltoall, *Copy messages through shared memory*.)
//
// A mailbox is a sealed memfd (it cannot shrink or grow, so a peer cannot make it fault), made
// by its owner, which publishes the descriptor numbers of the memfd and of its wake-up eventfd in
// its address; a peer that may read the owner's memory (ProcessReader's probe) may also take
// duplicates of those descriptors (pidfd_getfd needs the same ptrace permission), maps the memfd
// and claims a slot in it. Each slot is a ring of fixed-size records with one producer (the
// peer's Transport, whose token serialises its threads) and one consumer (the owner's token
// holder).
//
// Records are fixed (kRecordBytes); a message takes as many consecutive records as it needs, up
// to kMaxMessageBytes, and is published at once. A message that does not fit, or a ring without
// room for it, is the caller's to send another way (the Transport sends it over UCX): posting
// never waits. Slots are not given back while the mailbox lives: a peer that restarts claims
// another slot, and a mailbox without free slots refuses new peers, who then use UCX. (Why:
// docs/ARCHITECTURE.md, "Registers across nodes", *Decision: the mailbox's records are small and
// fixed*.)
class Mailbox {
 public:
  static constexpr int kSlots = 64;
  static constexpr int kRecordsPerSlot = 128;
  static constexpr size_t kRecordBytes = 56;  // of a message, per record
  static constexpr size_t kMaxMessageBytes = 1024;

  // A mailbox woken through `wake_descriptor` (an eventfd the owner polls; not owned).
  static absl::StatusOr<std::unique_ptr<Mailbox>> Create(int wake_descriptor);
  ~Mailbox();
  Mailbox(const Mailbox&) = delete;
  Mailbox& operator=(const Mailbox&) = delete;

  // What peers need (ProcessIdentity::mailbox_descriptor and wake_descriptor).
  int descriptor() const { return descriptor_; }
  int wake_descriptor() const { return wake_descriptor_; }

  // Calls `handle(sender, bytes)` for every record posted since the last call, in order per
  // sender; returns whether there was any. One thread at a time (the owner's token holder).
  // Records that are malformed (a bad length, a message cut short, a ring whose counters make no
  // sense) are dropped and logged.
  bool Receive(absl::FunctionRef<void(uint32_t sender, absl::string_view bytes)> handle);
  // The same, and `malformed(sender, what)` for each malformed message or ring dropped (what the
  // shared memory holds is the senders' word: lengths, counters and slot owners are all checked
  // before use), so that the owner can fail what it waited for from that sender.
  bool Receive(absl::FunctionRef<void(uint32_t sender, absl::string_view bytes)> handle,
               absl::FunctionRef<void(uint32_t sender, absl::string_view what)> malformed);
  // Whether a record is waiting; any thread.
  bool HasRecords() const;

  // Who a message is for, so that a post wakes only a thread that waits for it: any thread of the
  // owner (kAnyThread), or only a thread that drives the owner's transport in a wait of its own
  // (kDriver: the messages of a transfer whose two ends are driven, Transport::Queueing::
  // kDeferred). A parked thread is woken by the posts for any thread, a thread parked as a driver
  // by every post. So an owner's idle progress thread sleeps through the messages of the
  // collectives its ranks drive. (Why: docs/PERFORMANCE.md, alltoall, *A collective's messages
  // wake only a driving rank*.)
  enum class Reader { kAnyThread, kDriver };

  // Around a sleep on the wake-up eventfd: posts for `as` while parked write it. BeginPark returns
  // false (and parks nothing) when a record is already waiting; then EndPark must not be called.
  bool BeginPark(Reader as);
  void EndPark(Reader as);

 private:
  Mailbox(int descriptor, int wake_descriptor, MailboxLayout* layout)
      : descriptor_(descriptor), wake_descriptor_(wake_descriptor), layout_(layout) {}

  const int descriptor_;
  const int wake_descriptor_;
  MailboxLayout* const layout_;
  friend class MailboxSender;
};

// A peer's mailbox, mapped into this process, with the slot this process posts in.
class MailboxSender {
 public:
  // Maps the mailbox `identity` published, through `process` (a reader of that process), and
  // claims a slot for `sender` (this Transport's peer id). FailedPrecondition when the identity has
  // no mailbox or every slot is taken; the error of pidfd_getfd (no permission, an old kernel) or
  // of mmap otherwise.
  static absl::StatusOr<std::unique_ptr<MailboxSender>> Open(const ProcessReader& process,
                                                             const ProcessIdentity& identity,
                                                             uint32_t sender);
  ~MailboxSender();
  MailboxSender(const MailboxSender&) = delete;
  MailboxSender& operator=(const MailboxSender&) = delete;

  // Posts `bytes` (at most Mailbox::kMaxMessageBytes) and wakes the owner if a thread of it that
  // `reader` names sleeps (Mailbox::Reader). False when the message is too long or the ring has no
  // room for it: then nothing was posted. One thread at a time.
  bool Post(absl::string_view bytes, Mailbox::Reader reader = Mailbox::Reader::kAnyThread);

 private:
  MailboxSender(MailboxLayout* layout, int slot, int wake_descriptor)
      : layout_(layout), slot_(slot), wake_descriptor_(wake_descriptor) {}

  MailboxLayout* const layout_;
  const int slot_;
  const int wake_descriptor_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_MAILBOX_H_
