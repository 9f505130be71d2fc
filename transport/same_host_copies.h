#ifndef LOOM_TRANSPORT_SAME_HOST_COPIES_H_
#define LOOM_TRANSPORT_SAME_HOST_COPIES_H_

// The same-host copy protocol of a Transport (transport/transport.h): data to a peer on this host
// go by process_vm_readv instead of UCX. The sender announces its buffer (or posts small data
// inline to the receiver's mailbox), the receiver copies it once its receive is posted and answers
// when done. Holds the protocol's messages (CopyMessage), its state (the peers that can read this
// process, announced sends, announcements waiting for their receive) and their handling, which
// runs on the holder of the Transport's worker token like the rest of its work. Private to the
// Transport: included by its sources only.

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "transport/same_host.h"
#include "transport/same_host_cpus.h"
#include "transport/same_host_mailbox.h"
#include "transport/transport.h"

namespace loom::transport {

// The receiver of data from a peer on this host reads the sender's buffer with process_vm_readv;
// the messages of CopyMessage travel through the peer's mailbox, or as active messages on its UCX
// endpoint (an error text, a full ring, no mailbox).
class Transport::SameHostCopies {
 public:
  // A same-host copy message (its wire format; an error text or the data may follow it).
  struct CopyMessage {
    enum Kind : uint16_t {
      kCanRead = 1,   // receiver to sender, once: "I can read your memory"
      kAnnounce = 2,  // sender to receiver: `size` bytes for `tag` are at `address`
      kDone = 3,      // receiver to sender: the transfer `tag` is over (`status_code`, then text)
      kInline = 4,    // sender to receiver: the `size` bytes for `tag` follow (mailbox only)
    };
    // kAnnounce, kInline: the sender's end is driven (Queueing::kDeferred), so the receiver's end
    // is meant to be too; kDone: the sender's announcement said so. The message then wakes only a
    // driving thread of its receiver (Mailbox::Reader::kDriver).
    static constexpr uint16_t kDriven = 1;
    uint16_t kind = 0;
    uint16_t flags = 0;
    uint32_t status_code = 0;  // absl::StatusCode of kDone
    uint64_t tag = 0;
    uint64_t address = 0;
    uint64_t size = 0;
  };
  struct ReceivedCopyMessage {
    PeerId from;
    CopyMessage message;
    std::string trailer;  // what followed it: kDone's error text, kInline's data
  };
  static_assert(sizeof(CopyMessage) + kMaxInlineBytes == Mailbox::kMaxMessageBytes);

  // Of `transport`, which outlives it; `mailbox` is the one peers post their copy messages to
  // (null without same-host copies, or when it could not be made), and `enabled` whether same-host
  // copies are on (TransportOptions::same_host_copies, and UCX's transport list allows them).
  SameHostCopies(Transport& transport, std::unique_ptr<Mailbox> mailbox, bool enabled);
  ~SameHostCopies();
  SameHostCopies(const SameHostCopies&) = delete;
  SameHostCopies& operator=(const SameHostCopies&) = delete;

  bool enabled() const { return enabled_; }
  // This process's identity, which the Transport's address carries to its peers.
  const ProcessIdentity& identity() const { return identity_; }
  // Drained by the token holder (ReceiveFromMailbox); the Transport parks on it (Transport::Park).
  Mailbox* mailbox() const { return mailbox_.get(); }

  // Any thread: Transport::CopiesDirectlyTo, PostsToMailboxOf and SameHostProcessesHaveACpuEach.
  bool CopiesDirectlyTo(PeerId peer) const;
  bool PostsToMailboxOf(PeerId peer) const;
  bool ProcessesHaveACpuEach() const {
    return processes_have_a_cpu_each_.load(std::memory_order_relaxed);
  }

  // The rest: the token holder only.
  // Whether this process can read `peer`'s memory (and post to its mailbox), from the identity its
  // address carries; tells the peer when it can (kCanRead).
  void ProbeSameHost(Peer& peer, const ProcessIdentity& identity);
  // Moves the mailbox's records into copy_inbox_; whether there were any.
  bool ReceiveFromMailbox();
  // Handles the copy messages received and copies the receives UCX gave back; whether there were
  // any.
  bool HandleCopyMessages();
  // A small send through the peer's mailbox, data and all: done once posted.
  bool SendInline(std::unique_ptr<Operation>& operation, Peer& peer);
  bool StartCopySend(std::unique_ptr<Operation>& operation);
  bool StartCopyReceive(std::unique_ptr<Operation>& operation);
  // A receive posted to UCX, which an announcement with its tag takes back (until it completes:
  // ForgetPostedReceive).
  void RememberPostedReceive(Operation* receive);
  void ForgetPostedReceive(Operation* receive);
  // A receive that UCX reported cancelled for a copy (Operation::copy_from): copied by the next
  // HandleCopyMessages.
  void TakeCancelledReceive(std::unique_ptr<Operation> receive);
  // Fails the announced sends to `peer` (every peer: nullopt) with `reason`.
  void FailCopySends(std::optional<PeerId> peer, absl::string_view reason);
  // As the transport stops: the receives waiting for their copy and the announced sends complete
  // with Cancelled.
  void CancelAll();

  static ucs_status_t OnCopyMessage(void* argument, const void* header, size_t header_length,
                                    void* data, size_t length, const ucp_am_recv_param_t* param);

 private:
  void SendCopyMessage(PeerId peer, const CopyMessage& message, absl::string_view error = "");
  // Which of the peer's threads `message` wakes in its mailbox (CopyMessage::kDriven).
  static Mailbox::Reader ReaderOf(const CopyMessage& message);
  // kDone for the transfer `announcement` from `peer`: its outcome at this receiver.
  void SendCopyDone(PeerId peer, const CopyMessage& announcement, const absl::Status& status);
  void HandleCopyMessage(ReceivedCopyMessage received);
  // `peer` sent something malformed (a copy message of a bad length or kind, inline data whose
  // length is not the one it says, a status code no status has, a malformed mailbox record): it is
  // failed with DATA_LOSS naming it (Transport::OnPeerFailed, whose handler fails the job), and
  // nothing more is taken from it. An unknown sender is only logged.
  void ReportMalformed(PeerId peer, absl::string_view what);
  // Fills `receive` from `source` (a kAnnounce or kInline message) and finishes it.
  void CopyInto(std::unique_ptr<Operation> receive, const ReceivedCopyMessage& source);

  Transport& transport_;
  const PeerId self_;
  // The word peers probe, the mailbox peers post their copy messages to (null without same-host
  // copies, or when it could not be made; drained by the token holder), this process's identity,
  // and whether same-host copies are on.
  const std::unique_ptr<uint64_t> probe_word_;
  const std::unique_ptr<Mailbox> mailbox_;
  const ProcessIdentity identity_;
  const bool enabled_;

  mutable std::mutex readers_mutex_;
  absl::flat_hash_set<PeerId> readers_ ABSL_GUARDED_BY(readers_mutex_);  // peers that can read us
  absl::flat_hash_set<PeerId> mailbox_peers_ ABSL_GUARDED_BY(readers_mutex_);  // Peer::mailbox set

  // Token holder only.
  // This process and the peers other than this node whose memory it can read (processes on this
  // host), with their CPUs: a driver polls busily before it sleeps only while they have a core
  // each.
  SameHostCpus cpus_;
  // cpus_.HaveACpuEach(), for any thread.
  std::atomic<bool> processes_have_a_cpu_each_;
  // Same-host copy messages received, handled after the UCX progress call that delivered them.
  std::vector<ReceivedCopyMessage> copy_inbox_;
  // Receives taken back from UCX for an announced copy, to be copied.
  std::vector<std::unique_ptr<Operation>> receives_to_copy_;
  // Data sends announced to their receiver, waiting for its answer; by (peer, tag). Owned.
  absl::flat_hash_map<std::pair<PeerId, DataTag>, std::unique_ptr<Operation>> copy_sends_;
  // Receives posted to UCX, by tag: a same-host announcement with their tag takes them back.
  absl::flat_hash_map<DataTag, Operation*> posted_receives_;
  // Announcements and inline data that came before their receive was posted, by tag.
  absl::flat_hash_map<DataTag, ReceivedCopyMessage> announcements_;
  // Tags of which inline data came while another transfer with the tag waited for its receive (a
  // bug of the cluster, whose tags are unique per receiving node): those data were dropped, and
  // the receive fails with this error rather than take the other transfer's.
  absl::flat_hash_map<DataTag, absl::Status> dropped_duplicates_;
};

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_COPIES_H_
