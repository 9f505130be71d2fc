#ifndef LOOM_TRANSPORT_SAME_HOST_MAILBOX_LAYOUT_H_
#define LOOM_TRANSPORT_SAME_HOST_MAILBOX_LAYOUT_H_

// The layout of a same-host mailbox's shared memory (MailboxLayout, its slots and MailboxRecord),
// which the mailbox's owner and every peer posting to it map: the format between the processes.
// Private to the mailbox's code and its tests.

#include <atomic>
#include <cstdint>

#include "transport/same_host_mailbox.h"

namespace loom::transport {

// The shared memory of a same-host mailbox (transport/same_host_mailbox.h), which its owner and
// every peer posting to it map: the format between the processes. Only the mailbox's own code
// and its tests (which write records no sender would) use it.

inline constexpr uint64_t kMailboxLayoutMagic = 0x31584f424c494d4cull;  // "LMILBOX1"
inline constexpr uint32_t kMailboxLayoutVersion = 3;

// One record of a message: `length` of its bytes here, and whether the next record continues it.
struct MailboxRecord {
  uint32_t length;
  uint32_t continued;
  char bytes[Mailbox::kRecordBytes];
};
static_assert(sizeof(MailboxRecord) == 64);

// Counters are 64-bit and only grow: a ring holds records [tail, head), and head moves past a
// message's records only once they are all written. std::atomic of these widths is lock-free, so
// it works between processes.
struct MailboxLayout {
  struct alignas(64) Slot {
    std::atomic<uint64_t> owner;             // the sender's peer id + 1; 0 while free
    alignas(64) std::atomic<uint64_t> head;  // written by the sender
    alignas(64) std::atomic<uint64_t> tail;  // written by the owner
    MailboxRecord records[Mailbox::kRecordsPerSlot];
  };
  uint64_t magic;
  uint32_t version;
  uint32_t slot_count;
  std::atomic<uint32_t> parked;          // owner threads asleep on the wake-up eventfd
  std::atomic<uint32_t> drivers_parked;  // those of them parked as drivers (Mailbox::Reader)
  std::atomic<uint32_t> claimed;         // slots [0, claimed) may have owners
  Slot slots[Mailbox::kSlots];
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

}  // namespace loom::transport

#endif  // LOOM_TRANSPORT_SAME_HOST_MAILBOX_LAYOUT_H_
