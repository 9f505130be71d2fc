#include "transport/same_host_mailbox.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "transport/same_host_mailbox_layout.h"

namespace loom::transport {
namespace {

size_t RecordsFor(size_t bytes) {
  return std::max<size_t>((bytes + Mailbox::kRecordBytes - 1) / Mailbox::kRecordBytes, 1);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Mailbox>> Mailbox::Create(int wake_descriptor) {
  int descriptor = memfd_create("loom-mailbox", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (descriptor < 0) {
    return absl::InternalError(
        absl::StrCat("creating the same-host mailbox (memfd_create): ", std::strerror(errno)));
  }
  const size_t size = sizeof(MailboxLayout);
  void* memory = MAP_FAILED;
  if (ftruncate(descriptor, static_cast<off_t>(size)) == 0 &&
      fcntl(descriptor, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) == 0) {
    memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, descriptor, 0);
  }
  if (memory == MAP_FAILED) {
    int error = errno;
    close(descriptor);
    return absl::InternalError(
        absl::StrCat("creating the same-host mailbox (sizing, sealing or mapping its ", size,
                     " bytes): ", std::strerror(error)));
  }
  // A fresh memfd reads as zeros: every slot free, every counter 0.
  auto* layout = static_cast<MailboxLayout*>(memory);
  layout->magic = kMailboxLayoutMagic;
  layout->version = kMailboxLayoutVersion;
  layout->slot_count = kSlots;
  return std::unique_ptr<Mailbox>(new Mailbox(descriptor, wake_descriptor, layout));
}

Mailbox::~Mailbox() {
  munmap(layout_, sizeof(MailboxLayout));
  close(descriptor_);
}

bool Mailbox::Receive(absl::FunctionRef<void(uint32_t sender, absl::string_view bytes)> handle) {
  return Receive(handle, [](uint32_t sender, absl::string_view what) {
    LOG(ERROR) << "same-host mailbox: peer " << sender << ": " << what;
  });
}

bool Mailbox::Receive(absl::FunctionRef<void(uint32_t sender, absl::string_view bytes)> handle,
                      absl::FunctionRef<void(uint32_t sender, absl::string_view what)> malformed) {
  bool received = false;
  const uint32_t claimed = std::min<uint32_t>(layout_->claimed.load(), kSlots);
  for (uint32_t index = 0; index < claimed; ++index) {
    MailboxLayout::Slot& slot = layout_->slots[index];
    const uint64_t owner = slot.owner.load();
    if (owner == 0) continue;
    const auto sender = static_cast<uint32_t>(owner - 1);
    uint64_t tail = slot.tail.load(std::memory_order_relaxed);
    const uint64_t head = slot.head.load();
    if (head - tail > kRecordsPerSlot) {
      slot.tail.store(head);
      malformed(sender, absl::StrCat("its ring claims ", head - tail, " records where it has room for ",
                                     kRecordsPerSlot, "; dropped them"));
      continue;
    }
    while (tail != head) {
      char message[kMaxMessageBytes];
      size_t length = 0;
      bool too_long = false, continued = true;
      for (; tail != head && continued; ++tail) {
        const MailboxRecord& record = slot.records[tail % kRecordsPerSlot];
        const uint32_t record_length = record.length;
        continued = record.continued != 0;
        if (record_length > kRecordBytes || length + record_length > kMaxMessageBytes) {
          too_long = true;
        } else {
          std::memcpy(message + length, record.bytes, record_length);
          length += record_length;
        }
        // The sender may reuse the record once tail passes it; its bytes are copied by then.
        slot.tail.store(tail + 1);
      }
      if (too_long || continued) {
        malformed(sender, absl::StrCat("dropped a malformed message (",
                                       too_long ? "a record or the message too long" : "cut short",
                                       ")"));
        continue;
      }
      handle(sender, absl::string_view(message, length));
      received = true;
    }
  }
  return received;
}

bool Mailbox::HasRecords() const {
  const uint32_t claimed = std::min<uint32_t>(layout_->claimed.load(), kSlots);
  for (uint32_t index = 0; index < claimed; ++index) {
    const MailboxLayout::Slot& slot = layout_->slots[index];
    if (slot.head.load() != slot.tail.load()) return true;
  }
  return false;
}

bool Mailbox::BeginPark(Reader as) {
  // Sequentially consistent, against MailboxSender::Post: either the sender sees the counter of
  // its reader and writes the eventfd, or this sees the sender's record.
  layout_->parked.fetch_add(1);
  if (as == Reader::kDriver) layout_->drivers_parked.fetch_add(1);
  if (HasRecords()) {
    EndPark(as);
    return false;
  }
  return true;
}

void Mailbox::EndPark(Reader as) {
  if (as == Reader::kDriver) layout_->drivers_parked.fetch_sub(1);
  layout_->parked.fetch_sub(1);
}

absl::StatusOr<std::unique_ptr<MailboxSender>> MailboxSender::Open(const ProcessReader& process,
                                                                   const ProcessIdentity& identity,
                                                                   uint32_t sender) {
  if (identity.mailbox_descriptor < 0 || identity.wake_descriptor < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("process ", identity.pid, " publishes no same-host mailbox"));
  }
  absl::StatusOr<int> descriptor = process.DuplicateDescriptor(identity.mailbox_descriptor);
  if (!descriptor.ok()) return descriptor.status();
  const size_t size = sizeof(MailboxLayout);
  struct stat file {};
  void* memory = MAP_FAILED;
  int error = 0;
  // Sealed against shrinking, so the mapping cannot fault later.
  if (fstat(*descriptor, &file) != 0) {
    error = errno;
  } else if (static_cast<size_t>(file.st_size) != size ||
             (fcntl(*descriptor, F_GET_SEALS) & F_SEAL_SHRINK) == 0) {
    error = EINVAL;
  } else {
    memory = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, *descriptor, 0);
    if (memory == MAP_FAILED) error = errno;
  }
  close(*descriptor);
  if (memory == MAP_FAILED) {
    return absl::InternalError(absl::StrCat("mapping the same-host mailbox of process ",
                                            identity.pid, ": ", std::strerror(error)));
  }
  auto* layout = static_cast<MailboxLayout*>(memory);
  auto unmap = [&](absl::Status status) {
    munmap(memory, size);
    return status;
  };
  if (layout->magic != kMailboxLayoutMagic || layout->version != kMailboxLayoutVersion ||
      layout->slot_count != Mailbox::kSlots) {
    return unmap(absl::FailedPreconditionError(
        absl::StrCat("the same-host mailbox of process ", identity.pid, " has another layout")));
  }
  int slot = -1;
  for (int index = 0; index < Mailbox::kSlots && slot < 0; ++index) {
    uint64_t free = 0;
    if (layout->slots[index].owner.compare_exchange_strong(free, uint64_t{sender} + 1)) {
      slot = index;
    }
  }
  if (slot < 0) {
    return unmap(absl::FailedPreconditionError(
        absl::StrCat("the same-host mailbox of process ", identity.pid, " has no free slot")));
  }
  uint32_t claimed = layout->claimed.load();
  while (claimed < static_cast<uint32_t>(slot) + 1 &&
         !layout->claimed.compare_exchange_weak(claimed, static_cast<uint32_t>(slot) + 1)) {
  }
  absl::StatusOr<int> wake = process.DuplicateDescriptor(identity.wake_descriptor);
  if (!wake.ok()) {
    // The slot stays claimed (slots are never given back) and unused.
    return unmap(wake.status());
  }
  return std::unique_ptr<MailboxSender>(new MailboxSender(layout, slot, *wake));
}

MailboxSender::~MailboxSender() {
  munmap(layout_, sizeof(MailboxLayout));
  close(wake_descriptor_);
}

bool MailboxSender::Post(absl::string_view bytes, Mailbox::Reader reader) {
  if (bytes.size() > Mailbox::kMaxMessageBytes) return false;
  MailboxLayout::Slot& slot = layout_->slots[slot_];
  const uint64_t head = slot.head.load(std::memory_order_relaxed);
  const size_t records = RecordsFor(bytes.size());
  if (head - slot.tail.load() + records > Mailbox::kRecordsPerSlot) return false;
  for (size_t index = 0; index < records; ++index) {
    MailboxRecord& record = slot.records[(head + index) % Mailbox::kRecordsPerSlot];
    absl::string_view part = bytes.substr(index * Mailbox::kRecordBytes, Mailbox::kRecordBytes);
    record.length = static_cast<uint32_t>(part.size());
    record.continued = index + 1 < records ? 1 : 0;
    if (!part.empty()) std::memcpy(record.bytes, part.data(), part.size());
  }
  slot.head.store(head + records);
  const std::atomic<uint32_t>& sleepers =
      reader == Mailbox::Reader::kDriver ? layout_->drivers_parked : layout_->parked;
  if (sleepers.load() > 0) {
    uint64_t one = 1;
    // EAGAIN: the counter is full, so the owner is being woken anyway.
    if (write(wake_descriptor_, &one, sizeof(one)) < 0 && errno != EAGAIN) {
      PLOG(ERROR) << "same-host mailbox: waking the receiving process";
    }
  }
  return true;
}

}  // namespace loom::transport
