#include "runtime/collectives/network_collectives.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/balanced_split.h"
#include "core/collective_shapes.h"
#include "core/collective_staging.h"
#include "core/data_type.h"
#include "core/device_name.h"
#include "glog/logging.h"
#include "runtime/block_copy.h"
#include "runtime/collectives/collective_agreement.h"
#include "runtime/collectives/collective_header.h"
#include "runtime/collectives/collective_reduction.h"

namespace loom {
namespace {

using Clock = TransferGroup::Clock;
using Direction = TransferGroup::Direction;

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

std::byte* Bytes(void* data) { return static_cast<std::byte*>(data); }

// Whether, in the direct exchange of the collective with these input shapes (by rank), every
// rank receives a transfer from every peer: then no rank can finish a run before every peer has
// started it (NetworkCollectives' class comment). A balanced split of a length into `size` parts
// has no empty part when the length is at least `size`.
bool EveryRankHearsFromEveryPeer(const plan::CollectiveConf& conf,
                                 const std::vector<Shape>& input_shapes) {
  const int64_t size = static_cast<int64_t>(input_shapes.size());
  for (const Shape& input : input_shapes) {
    if (input.NumElements() == 0) return false;
    switch (conf.kind()) {
      case plan::ALL_GATHER:  // the whole input to every peer
        break;
      case plan::ALL_TO_ALL:      // slice q along `axis` to rank q
      case plan::REDUCE_SCATTER:  // slice q along `axis` to its owner q
        if (input.dimension(conf.axis()) < size) return false;
        break;
      case plan::ALL_REDUCE:  // chunk q of the flattened elements to its owner q, and back
        if (input.NumElements() < size) return false;
        break;
      default:
        return false;
    }
  }
  return true;
}

}  // namespace

// One rank's collective in progress.
struct NetworkCollectives::Collective {
  Collective(const CollectiveCall& call, int64_t instance, RankState& state)
      : call(call),
        rank(call.rank),
        instance(instance),
        state(state),
        group(state.group),
        header_group(state.header_group) {}

  const CollectiveCall& call;
  const int rank;
  const int64_t instance;
  RankState& state;
  // The data transfers, and the headers apart, so that a failed data transfer (say, one sized
  // for another collective) does not hide the header that explains it.
  std::shared_ptr<TransferGroup> group;
  std::shared_ptr<TransferGroup> header_group;
  // This rank's header, and the wire slots of every rank's (slot r: rank r's), with the indices
  // of the receives in header_group (-1 for this rank).
  CollectiveHeader own;
  std::byte* header_slots = nullptr;
  std::vector<int> header_receives;
  // The shapes of this collective, in state.known: from an earlier run (then the peers' headers,
  // where they are exchanged, are checked against them), or learned from the headers; null until
  // then.
  const KnownCollective* known = nullptr;
  // This rank's staging buffers by slot (known->staging_bytes); null: the block moves in place.
  std::vector<std::byte*> staging;
  // "header exchange" or "data exchange", and when its wait gives up.
  const char* stage = "header exchange";
  Clock::time_point deadline;
};

Network::Tag NetworkCollectives::TransferTag(int communicator_index, int64_t instance, Phase phase,
                                             int source, int destination) {
  constexpr uint64_t kRankMask = (uint64_t{1} << kRankBits) - 1;
  constexpr uint64_t kInstanceMask = (uint64_t{1} << kInstanceBits) - 1;
  constexpr int kSourceShift = kRankBits;
  constexpr int kPhaseShift = kSourceShift + kRankBits;
  constexpr int kInstanceShift = kPhaseShift + kPhaseBits;
  constexpr int kCommunicatorShift = kInstanceShift + kInstanceBits;
  static_assert(kCommunicatorShift + kCommunicatorBits == 63);
  return Network::kCollectiveTagBit |
         (static_cast<uint64_t>(communicator_index) << kCommunicatorShift) |
         ((static_cast<uint64_t>(instance) & kInstanceMask) << kInstanceShift) |
         (static_cast<uint64_t>(phase) << kPhaseShift) |
         ((static_cast<uint64_t>(source) & kRankMask) << kSourceShift) |
         (static_cast<uint64_t>(destination) & kRankMask);
}

absl::StatusOr<std::unique_ptr<NetworkCollectives>> NetworkCollectives::Create(
    const plan::Communicator& communicator, int node, Network* network, Options options) {
  const std::string prefix = absl::StrCat("communicator '", communicator.name(), "': ");
  const int size = communicator.devices_size();
  if (size == 0) return absl::InvalidArgumentError(absl::StrCat(prefix, "it has no ranks"));
  if (size > kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "network collectives serve communicators of at most ", kMaxRanks,
                     " ranks (the ranks' share of the transfer tags), not ", size));
  }
  if (communicator.index() < 0 || communicator.index() >= kMaxCommunicators) {
    return absl::InvalidArgumentError(
        absl::StrCat(prefix, "its index ", communicator.index(), " is outside [0, ",
                     kMaxCommunicators, "), the communicators network collectives can tell apart"));
  }
  for (int rank = 0; rank < size; ++rank) {
    const plan::Device& device = communicator.devices(rank);
    if (device.type() != plan::CPU) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, "rank ", rank,
                       " is not a CPU device: network collectives move host memory "
                       "(GPU communicators need the NCCL backend)"));
    }
    if (device.node() < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix, "rank ", rank, " is on node ", device.node()));
    }
  }
  if (network == nullptr) return absl::InvalidArgumentError(absl::StrCat(prefix, "no network"));
  return std::unique_ptr<NetworkCollectives>(
      new NetworkCollectives(communicator, node, network, options));
}

NetworkCollectives::NetworkCollectives(const plan::Communicator& communicator, int node,
                                       Network* network, Options options)
    : name_(communicator.name()),
      size_(communicator.devices_size()),
      num_collectives_(communicator.num_collectives()),
      communicator_index_(communicator.index()),
      node_(node),
      network_(network),
      options_(options),
      ranks_(size_) {
  for (int rank = 0; rank < size_; ++rank) {
    const plan::Device& device = communicator.devices(rank);
    node_of_rank_.push_back(device.node());
    if (device.node() != node_) continue;
    std::shared_ptr<DeviceMemory>& memory = ranks_[rank].memory;
    if (rank < static_cast<int>(options_.memories.size())) memory = options_.memories[rank];
    if (memory == nullptr) memory = std::make_shared<DeviceMemory>(DeviceName(device), 0);
  }
}

void NetworkCollectives::FailLocked(absl::Status status) {
  if (!failure_.ok()) return;
  failure_ = std::move(status);
  for (RankState& state : ranks_) {
    if (state.group != nullptr) state.group->Interrupt(failure_);
    if (state.header_group != nullptr) state.header_group->Interrupt(failure_);
  }
  // A rank driving the network (AwaitTransfer) may sleep on its events: let it see the failure.
  network_->WakeDriver();
}

void NetworkCollectives::Abort(absl::Status reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  FailLocked(absl::AbortedError(
      absl::StrCat("communicator '", name_, "' was aborted: ", reason.message())));
}

absl::Status NetworkCollectives::Run(const CollectiveCall& call) {
  const int rank = call.rank;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator '", name_, "' has ", size_, " ranks, so it has no rank ", rank));
  }
  if (node_of_rank_[rank] != node_) {
    return absl::InvalidArgumentError(absl::StrCat("communicator '", name_, "': rank ", rank,
                                                   " lives on node ", node_of_rank_[rank],
                                                   ", not on this node ", node_));
  }
  RankState& state = ranks_[rank];
  // The shapes of this collective's earlier runs, if any (state.known is this rank's thread's).
  auto found = state.known.find(call.conf->sequence());
  const KnownCollective* known = found != state.known.end() ? &found->second : nullptr;
  int64_t instance = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!failure_.ok()) return failure_;
    if (state.group != nullptr) {
      FailLocked(
          absl::InternalError(absl::StrCat("communicator '", name_, "': rank ", rank,
                                           " enters collective ", DescribeCollective(*call.conf),
                                           " while it is still inside another one (two threads "
                                           "run one rank)")));
      return failure_;
    }
    instance = state.instance++;
    state.group = std::make_shared<TransferGroup>();
    if (known == nullptr || !known->data_only) {
      state.header_group = std::make_shared<TransferGroup>();
    }
  }
  Collective collective(call, instance, state);
  collective.known = known;
  absl::Status status = RunCollective(collective);
  std::lock_guard<std::mutex> lock(mutex_);
  state.group = nullptr;
  state.header_group = nullptr;
  if (!status.ok()) {
    FailLocked(std::move(status));
    return failure_;
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::RunCollective(Collective& collective) {
  collective.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.timeout);
  if (collective.known != nullptr && collective.known->data_only) {
    // A later run where every rank hears from every peer: the data alone, after this rank's own
    // check against the runs every rank agreed on (see the class comment).
    if (absl::Status status = CheckRerun(collective); !status.ok()) return status;
  } else {
    if (absl::Status status = SendHeader(collective); !status.ok()) return status;
    if (absl::Status status = CheckHeaders(collective); !status.ok()) return status;
    collective.deadline = Clock::now() + absl::ToChronoNanoseconds(options_.timeout);
  }
  collective.stage = "data exchange";
  if (absl::Status status = AllocateStaging(collective); !status.ok()) return status;
  absl::Status status;
  switch (collective.call.conf->kind()) {
    case plan::ALL_REDUCE:
      status = RunAllReduce(collective);
      break;
    case plan::REDUCE_SCATTER:
      status = RunReduceScatter(collective);
      break;
    case plan::ALL_GATHER:
      status = RunAllGather(collective);
      break;
    case plan::ALL_TO_ALL:
      status = RunAllToAll(collective);
      break;
    default:
      LOG(FATAL) << "communicator '" << name_ << "': unchecked collective kind "
                 << collective.call.conf->kind();
  }
  if (!status.ok()) return status;
  // Sends from the caller's input (and the last receives) complete before the buffers go back.
  return Await(collective, -1);
}

absl::Status NetworkCollectives::CheckRerun(const Collective& collective) const {
  const CollectiveCall& call = collective.call;
  const plan::CollectiveConf& conf = *call.conf;
  const CollectiveHeader& first = collective.known->own;
  // Built on a failure only: this runs before every collective.
  const auto failure = [&](auto&&... parts) {
    return absl::InternalError(absl::StrCat("communicator '", name_, "': rank ", collective.rank,
                                            " runs collective ", DescribeCollective(conf),
                                            parts...));
  };
  const int64_t placed = collective.instance % num_collectives_;
  if (conf.sequence() != placed) {
    auto expected = collective.state.known.find(placed);
    return failure(" as the communicator's collective number ", collective.instance,
                   ", where its global order of ", num_collectives_, " collectives puts ",
                   expected != collective.state.known.end()
                       ? absl::StrCat(DescribeCollective(expected->second.own.conf),
                                      ", which every rank ran before")
                       : absl::StrCat("sequence ", placed),
                   ": the ranks left the communicator's global order (a plan bug)");
  }
  if (conf.name() != first.conf.name() || !SameCollectiveSettings(conf, first.conf)) {
    return failure(" as ", DescribeCollectiveSettings(conf),
                   ", where its earlier runs of sequence ", conf.sequence(), " ran ",
                   DescribeCollective(first.conf), " as ", DescribeCollectiveSettings(first.conf),
                   " (a plan bug)");
  }
  const auto changed = [&](absl::string_view buffer, const TensorView& now,
                           plan::DataType first_type, const Shape& first_shape) {
    return failure(" with its ", buffer, " ", DataTypeName(now.data_type), " ",
                   now.shape.ToString(), " where its earlier runs had ", DataTypeName(first_type),
                   " ", first_shape.ToString(),
                   " (a collective's buffers are the same at every piece: its registers)");
  };
  if (call.input.data_type != first.input_type || call.input.shape != first.input_shape) {
    return changed("input", call.input, first.input_type, first.input_shape);
  }
  if (call.output.data_type != first.output_type || call.output.shape != first.output_shape) {
    return changed("output", call.output, first.output_type, first.output_shape);
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::SendHeader(Collective& collective) {
  const int rank = collective.rank;
  absl::StatusOr<CollectiveHeader> own =
      CollectiveHeader::FromCall(collective.call, collective.instance);
  if (!own.ok()) {
    return absl::Status(own.status().code(),
                        absl::StrCat("communicator '", name_, "': ", own.status().message()));
  }
  collective.own = *std::move(own);
  // Slot `rank` holds this rank's encoded header (sent to every peer); the others receive.
  auto wire = std::make_shared<std::vector<std::byte>>(CollectiveHeader::kBytes * size_);
  collective.header_group->KeepAlive(wire);
  std::byte* slots = collective.header_slots = wire->data();
  collective.own.Encode(slots + CollectiveHeader::kBytes * rank);
  collective.header_receives.assign(size_, -1);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) continue;
    collective.header_receives[peer] =
        PostReceive(collective, Phase::kHeader, peer, slots + CollectiveHeader::kBytes * peer,
                    CollectiveHeader::kBytes);
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) continue;
    PostSend(collective, Phase::kHeader, peer, slots + CollectiveHeader::kBytes * rank,
             CollectiveHeader::kBytes);
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::CheckHeaders(Collective& collective) {
  const int rank = collective.rank;
  const char* stage = collective.stage;
  collective.stage = "header exchange";
  std::vector<CollectiveHeader> headers(size_);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) {
      headers[peer] = collective.own;
      continue;
    }
    if (absl::Status status =
            AwaitTransfer(collective, *collective.header_group, collective.header_receives[peer]);
        !status.ok()) {
      return status;
    }
    absl::StatusOr<CollectiveHeader> header =
        CollectiveHeader::Decode(collective.header_slots + CollectiveHeader::kBytes * peer);
    if (!header.ok() || header->rank != peer) {
      return absl::DataLossError(absl::StrCat(
          "communicator '", name_, "': rank ", rank,
          " received a malformed collective header "
          "from rank ",
          peer, ": ", header.ok() ? "it names another rank" : header.status().message()));
    }
    if (header->instance != collective.instance) {
      return absl::InternalError(
          absl::StrCat("communicator '", name_, "': rank ", rank, " runs collective ",
                       DescribeCollective(*collective.call.conf), " as its collective number ",
                       collective.instance, " while rank ", peer, " runs ",
                       DescribeCollective(header->conf), " as its number ", header->instance));
    }
    headers[peer] = *std::move(header);
  }
  std::vector<CollectiveSignature> signatures;
  signatures.reserve(size_);
  for (const CollectiveHeader& header : headers) signatures.push_back(header.Signature());
  if (absl::Status status =
          CheckCollectiveAgreement(name_, num_collectives_, collective.instance, signatures);
      !status.ok()) {
    return status;
  }
  if (collective.known != nullptr) {
    const plan::DataType first_type = collective.known->own.input_type;
    if (collective.own.input_type != first_type) {
      return absl::InternalError(absl::StrCat(
          "communicator '", name_, "': collective ", DescribeCollective(*collective.call.conf),
          ": its buffers are ", DataTypeName(collective.own.input_type),
          " where its earlier runs had ", DataTypeName(first_type),
          " (a collective's buffers are the same at every piece: its registers)"));
    }
    for (int source = 0; source < size_; ++source) {
      if (headers[source].input_shape == collective.known->input_shapes[source]) continue;
      return absl::InternalError(absl::StrCat(
          "communicator '", name_, "': collective ", DescribeCollective(*collective.call.conf),
          ": rank ", source, "'s input is ", headers[source].input_shape.ToString(),
          " where its earlier runs had ", collective.known->input_shapes[source].ToString(),
          " (a collective's shapes are the same at every piece: its registers' shapes)"));
    }
  } else if (absl::Status status = LearnCollective(collective, headers); !status.ok()) {
    return status;
  }
  collective.stage = stage;
  return absl::OkStatus();
}

int NetworkCollectives::PostReceive(Collective& collective, Phase phase, int source, void* buffer,
                                    size_t bytes) {
  if (bytes == 0) return -1;
  TransferGroup& group = phase == Phase::kHeader ? *collective.header_group : *collective.group;
  const int index = group.Add(source, Direction::kReceive);
  absl::Status posted = network_->ReceiveData(
      TransferTag(communicator_index_, collective.instance, phase, source, collective.rank), buffer,
      bytes, group.Completion(index));
  if (!posted.ok()) group.Fail(index, std::move(posted));
  return index;
}

int NetworkCollectives::PostSend(Collective& collective, Phase phase, int destination,
                                 const void* buffer, size_t bytes) {
  if (bytes == 0) return -1;
  TransferGroup& group = phase == Phase::kHeader ? *collective.header_group : *collective.group;
  const int index = group.Add(destination, Direction::kSend);
  absl::Status posted = network_->SendData(
      node_of_rank_[destination],
      TransferTag(communicator_index_, collective.instance, phase, collective.rank, destination),
      buffer, bytes, group.Completion(index));
  if (!posted.ok()) group.Fail(index, std::move(posted));
  return index;
}

absl::Status NetworkCollectives::Await(Collective& collective, int index) {
  return AwaitTransfer(collective, *collective.group, index);
}

absl::Status NetworkCollectives::AwaitTransfer(Collective& collective, TransferGroup& group,
                                               int index) {
  // This rank's thread moves the network forward itself where it can (Network::DriveUntil); the
  // wait below then returns at once.
  network_->DriveUntil([&group, index] { return group.Over(index); }, collective.deadline);
  const TransferGroup::Outcome outcome =
      index < 0 ? group.WaitAll(collective.deadline, options_.spin)
                : group.Wait(index, collective.deadline, options_.spin);
  const plan::CollectiveConf& conf = *collective.call.conf;
  const std::string where = absl::StrCat("communicator '", name_, "': collective ",
                                         DescribeCollective(conf), " on rank ", collective.rank);
  switch (outcome) {
    case TransferGroup::Outcome::kDone:
      return absl::OkStatus();
    case TransferGroup::Outcome::kInterrupted:
      return group.interrupt_reason();
    case TransferGroup::Outcome::kFailed: {
      const int failed = group.failed_transfer();
      const int peer = group.peer(failed);
      const absl::Status error = group.error();
      return absl::Status(
          error.code(), absl::StrCat(where, ": ",
                                     group.direction(failed) == Direction::kSend ? "sending to"
                                                                                 : "receiving from",
                                     " rank ", peer, " (node ", node_of_rank_[peer], ") in the ",
                                     collective.stage, " failed: ", error.message()));
    }
    case TransferGroup::Outcome::kTimedOut: {
      std::string missing;
      std::vector<int> silent = group.PendingPeers(Direction::kReceive);
      if (!silent.empty()) {
        missing = absl::StrCat("has not heard from ", RankList(silent),
                               " (is a peer missing, or do the ranks run different numbers of "
                               "collectives?)");
      } else {
        missing =
            absl::StrCat(RankList(group.PendingPeers(Direction::kSend)), " did not take its data");
      }
      return absl::DeadlineExceededError(
          absl::StrCat(where, " waited ", absl::FormatDuration(options_.timeout), " at piece ",
                       collective.call.piece, " in the ", collective.stage, ": ", missing));
    }
  }
  return absl::InternalError("unreachable");
}

absl::Status NetworkCollectives::LearnCollective(Collective& collective,
                                                 const std::vector<CollectiveHeader>& headers) {
  const CollectiveCall& call = collective.call;
  KnownCollective learned;
  learned.own = collective.own;
  for (const CollectiveHeader& header : headers) learned.input_shapes.push_back(header.input_shape);
  learned.data_only = EveryRankHearsFromEveryPeer(*call.conf, learned.input_shapes);
  absl::StatusOr<std::vector<int64_t>> bytes = CollectiveStagingBytes(
      *call.conf, learned.input_shapes, collective.rank, call.output.data_type);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("communicator '", name_, "': ", bytes.status().message()));
  }
  learned.staging_bytes = *std::move(bytes);
  KnownCollective& known = collective.state.known[call.conf->sequence()];
  known = std::move(learned);
  collective.known = &known;
  return absl::OkStatus();
}

absl::Status NetworkCollectives::AllocateStaging(Collective& collective) {
  const CollectiveCall& call = collective.call;
  const std::vector<int64_t>& bytes = collective.known->staging_bytes;
  std::vector<std::shared_ptr<StagingBuffer>>& kept = collective.state.staging;
  if (kept.size() < bytes.size()) kept.resize(bytes.size());
  collective.staging.assign(bytes.size(), nullptr);
  for (size_t slot = 0; slot < bytes.size(); ++slot) {
    const int64_t size = bytes[slot];
    if (size == 0) continue;
    std::shared_ptr<StagingBuffer>& buffer = kept[slot];
    if (buffer == nullptr || buffer->size < static_cast<size_t>(size)) {
      // A fresh buffer: the old one may still be referenced by an earlier, abandoned group. This
      // rank lets go of it first, so that its budget need not hold both.
      buffer = nullptr;
      const std::shared_ptr<DeviceMemory>& memory = collective.state.memory;
      absl::StatusOr<void*> allocated = memory->Allocate(
          size, absl::StrCat("staging buffer ", slot, " of communicator '", name_, "' (collective ",
                             DescribeCollective(*call.conf), ")"));
      if (!allocated.ok()) return allocated.status();
      buffer = std::make_shared<StagingBuffer>(memory, static_cast<std::byte*>(*allocated),
                                               static_cast<size_t>(size));
    }
    collective.group->KeepAlive(buffer);
    collective.staging[slot] = buffer->bytes;
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::ReduceToOwners(Collective& collective, const TensorView& input,
                                                int axis, float* reduced) {
  const int rank = collective.rank;
  const plan::ReduceOperation operation = collective.call.conf->reduce();
  const Shape& shape = input.shape;
  const int64_t outer = shape.ElementsBefore(axis);
  const int64_t inner = shape.ElementsAfter(axis);
  const float* values = input.Data<float>();
  auto slice_of = [&](int owner) { return BalancedRange(shape.dimension(axis), size_, owner); };
  auto slice_shape = [&](const AxisRange& range) {
    Shape slice = shape;
    slice.set_dimension(axis, range.size());
    return slice;
  };
  const AxisRange own = slice_of(rank);
  const int64_t own_elements = outer * own.size() * inner;
  const size_t own_bytes = static_cast<size_t>(own_elements) * sizeof(float);

  // Receives first: rank 0's contribution lands in `reduced` itself (the sum starts from it),
  // the others in staging.
  std::vector<int> received(size_, -1);
  std::vector<const float*> contribution(size_, nullptr);
  for (int source = 0; source < size_ && own_elements > 0; ++source) {
    if (source == rank) continue;
    float* target = source == 0 ? reduced : reinterpret_cast<float*>(collective.staging[source]);
    received[source] = PostReceive(collective, Phase::kScatter, source, target, own_bytes);
    contribution[source] = target;
  }
  // Then this rank's contributions to the other owners, straight from the input when contiguous.
  for (int owner = 0; owner < size_; ++owner) {
    if (owner == rank) continue;
    const AxisRange range = slice_of(owner);
    const int64_t elements = outer * range.size() * inner;
    if (elements == 0) continue;
    const float* source = values + range.begin * inner;
    if (std::byte* staging = collective.staging[size_ + owner]; staging != nullptr) {
      auto* packed = reinterpret_cast<float*>(staging);
      const Shape slice = slice_shape(range);
      ForEachBlockRun(
          slice, shape, AxisOrigin(shape.rank(), axis, range.begin), slice,
          AxisOrigin(slice.rank(), axis, 0), [&](int64_t from, int64_t to, int64_t count) {
            std::memcpy(packed + to, values + from, static_cast<size_t>(count) * sizeof(float));
          });
      source = packed;
    }
    PostSend(collective, Phase::kScatter, owner, source,
             static_cast<size_t>(elements) * sizeof(float));
  }
  if (own_elements == 0) return absl::OkStatus();

  // Reduce in rank order, each contribution as soon as it and all before it are in: exactly the
  // operations of SharedMemoryCollectives, so the result is bit-identical.
  const Shape slice = slice_shape(own);
  const auto input_origin = AxisOrigin(shape.rank(), axis, own.begin);
  const auto slice_origin = AxisOrigin(slice.rank(), axis, 0);
  for (int source = 0; source < size_; ++source) {
    if (source != rank) {
      if (absl::Status status = Await(collective, received[source]); !status.ok()) return status;
      if (source != 0) CombineInto(operation, reduced, contribution[source], own_elements);
      continue;
    }
    ForEachBlockRun(slice, shape, input_origin, slice, slice_origin,
                    [&](int64_t from, int64_t to, int64_t count) {
                      if (source == 0) {
                        std::memcpy(reduced + to, values + from,
                                    static_cast<size_t>(count) * sizeof(float));
                      } else {
                        CombineInto(operation, reduced + to, values + from, count);
                      }
                    });
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::RunAllReduce(Collective& collective) {
  const int rank = collective.rank;
  const TensorView& output = collective.call.output;
  const int64_t elements = output.NumElements();
  float* out = output.Data<float>();
  // The gathers of the other owners' reduced chunks land in place; post them first.
  for (int owner = 0; owner < size_; ++owner) {
    if (owner == rank) continue;
    const AxisRange chunk = BalancedRange(elements, size_, owner);
    PostReceive(collective, Phase::kGather, owner, out + chunk.begin,
                static_cast<size_t>(chunk.size()) * sizeof(float));
  }
  const TensorView flat{collective.call.input.data, plan::FLOAT32, Shape{elements}};
  const AxisRange own = BalancedRange(elements, size_, rank);
  if (absl::Status status = ReduceToOwners(collective, flat, 0, out + own.begin); !status.ok()) {
    return status;
  }
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) continue;
    PostSend(collective, Phase::kGather, peer, out + own.begin,
             static_cast<size_t>(own.size()) * sizeof(float));
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::RunReduceScatter(Collective& collective) {
  return ReduceToOwners(collective, collective.call.input, collective.call.conf->axis(),
                        collective.call.output.Data<float>());
}

NetworkCollectives::IncomingBlocks NetworkCollectives::PostBlockReceives(
    Collective& collective, int concat_axis, absl::FunctionRef<Shape(int)> block_from) {
  const TensorView& output = collective.call.output;
  const int64_t element_size = DataTypeSize(output.data_type);
  const int64_t inner = output.shape.ElementsAfter(concat_axis);
  IncomingBlocks incoming{.offset = std::vector<int64_t>(size_ + 1, 0),
                          .received = std::vector<int>(size_, -1),
                          .staged = std::vector<std::byte*>(size_, nullptr)};
  for (int source = 0; source < size_; ++source) {
    incoming.offset[source + 1] =
        incoming.offset[source] + block_from(source).dimension(concat_axis);
  }
  for (int source = 0; source < size_; ++source) {
    if (source == collective.rank) continue;
    const size_t bytes = static_cast<size_t>(block_from(source).NumElements() * element_size);
    if (bytes == 0) continue;
    // Blocks along the leading axes are contiguous in the output: received in place.
    incoming.staged[source] = collective.staging[source];
    std::byte* target = incoming.staged[source] != nullptr
                            ? incoming.staged[source]
                            : Bytes(output.data) + incoming.offset[source] * inner * element_size;
    incoming.received[source] = PostReceive(collective, Phase::kGather, source, target, bytes);
  }
  return incoming;
}

absl::Status NetworkCollectives::PlaceStagedBlocks(Collective& collective,
                                                   const IncomingBlocks& incoming, int concat_axis,
                                                   absl::FunctionRef<Shape(int)> block_from) {
  const TensorView& output = collective.call.output;
  const int rank_count = output.shape.rank();
  for (int source = 0; source < size_; ++source) {
    if (incoming.staged[source] == nullptr) continue;
    if (absl::Status status = Await(collective, incoming.received[source]); !status.ok()) {
      return status;
    }
    const Shape block = block_from(source);
    CopyBlock(TensorView{incoming.staged[source], output.data_type, block},
              AxisOrigin(rank_count, 0, 0), output,
              AxisOrigin(rank_count, concat_axis, incoming.offset[source]), block);
  }
  return absl::OkStatus();
}

absl::Status NetworkCollectives::RunAllGather(Collective& collective) {
  const int rank = collective.rank;
  const TensorView& input = collective.call.input;
  const TensorView& output = collective.call.output;
  const int axis = collective.call.conf->axis();
  auto block_from = [&](int source) { return collective.known->input_shapes[source]; };
  const IncomingBlocks incoming = PostBlockReceives(collective, axis, block_from);
  for (int peer = 0; peer < size_; ++peer) {
    if (peer == rank) continue;
    PostSend(collective, Phase::kGather, peer, input.data, static_cast<size_t>(input.ByteSize()));
  }
  const int rank_count = output.shape.rank();
  CopyBlock(input, AxisOrigin(rank_count, axis, 0), output,
            AxisOrigin(rank_count, axis, incoming.offset[rank]), input.shape);
  return PlaceStagedBlocks(collective, incoming, axis, block_from);
}

absl::Status NetworkCollectives::RunAllToAll(Collective& collective) {
  const int rank = collective.rank;
  const TensorView& input = collective.call.input;
  const TensorView& output = collective.call.output;
  const int axis = collective.call.conf->axis();
  const int concat_axis = collective.call.conf->concat_axis();
  const int64_t element_size = DataTypeSize(output.data_type);
  const int rank_count = output.shape.rank();
  // The block `source` sends to `destination`: its balanced slice along `axis`.
  auto block_of = [&](int source, int destination) {
    Shape block = collective.known->input_shapes[source];
    block.set_dimension(axis, BalancedRange(block.dimension(axis), size_, destination).size());
    return block;
  };
  const int64_t input_inner = input.shape.ElementsAfter(axis);
  for (int destination = 0; destination < size_; ++destination) {
    if (destination == rank) continue;
    const Shape block = block_of(rank, destination);
    const size_t bytes = static_cast<size_t>(block.NumElements() * element_size);
    if (bytes == 0) continue;
    const AxisRange range = BalancedRange(input.shape.dimension(axis), size_, destination);
    const void* source = Bytes(input.data) + range.begin * input_inner * element_size;
    // Slices along the leading axes are contiguous in the input: sent from it.
    if (std::byte* packed = collective.staging[size_ + destination]; packed != nullptr) {
      CopyBlock(input, AxisOrigin(rank_count, axis, range.begin),
                TensorView{packed, input.data_type, block}, AxisOrigin(rank_count, axis, 0), block);
      source = packed;
    }
    PostSend(collective, Phase::kGather, destination, source, bytes);
  }
  auto block_from = [&](int source) { return block_of(source, rank); };
  const IncomingBlocks incoming = PostBlockReceives(collective, concat_axis, block_from);
  // The transfers start before this rank copies its own block, so that no peer waits for this
  // rank's data (or, on one host, its announcement) for the length of that copy: a drive that
  // ends after its first round posts them. The sends are queued before the receives because a
  // receive whose same-host announcement is already here copies during that drive.
  network_->DriveUntil([] { return true; }, collective.deadline);
  const AxisRange own = BalancedRange(input.shape.dimension(axis), size_, rank);
  CopyBlock(input, AxisOrigin(rank_count, axis, own.begin), output,
            AxisOrigin(rank_count, concat_axis, incoming.offset[rank]), block_of(rank, rank));
  return PlaceStagedBlocks(collective, incoming, concat_axis, block_from);
}

absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNetworkCollectives(
    const plan::Communicator& communicator, int node, Network* network,
    NetworkCollectives::Options options) {
  absl::StatusOr<std::unique_ptr<NetworkCollectives>> backend =
      NetworkCollectives::Create(communicator, node, network, options);
  if (!backend.ok()) return backend.status();
  return std::unique_ptr<CollectiveBackend>(*std::move(backend));
}

}  // namespace loom
