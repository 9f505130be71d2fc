#ifndef LOOM_RUNTIME_COLLECTIVES_NETWORK_COLLECTIVES_H_
#define LOOM_RUNTIME_COLLECTIVES_NETWORK_COLLECTIVES_H_

// The network collective backend, for communicators whose CPU ranks span several nodes:
// NetworkCollectives (one per communicator per node) exchanges headers at a collective's first run,
// then moves the data directly between ranks over the node's Network, with staging buffers from the
// ranks' device memory and its own layout of transfer tags. MakeNetworkCollectives is what
// JobRuntime calls for such communicators.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/tensor.h"
#include "proto/plan.pb.h"
#include "runtime/collective_backend.h"
#include "runtime/collectives/collective_header.h"
#include "runtime/device_memory.h"
#include "runtime/network.h"
#include "runtime/transfer_group.h"

namespace loom {

// The collective backend of a communicator whose CPU ranks live on several nodes: one object per
// communicator per node serves every rank of the communicator on that node, and moves data with
// the node's Network (UCX in the cluster). Ranks on this node are reached like the others: the
// node is its own network peer, so every rank runs the same code and the same transfers.
// (Why, and what it costs: docs/ARCHITECTURE.md, "Collectives between nodes".)
//
// One collective, on each rank r of n:
//  1. Headers, at a collective's first run (a sequence number of the communicator). r sends its
//     CollectiveHeader (identity, settings, position in the order, data types, shapes) to every
//     peer and receives theirs, before any data moves. Every rank runs CheckCollectiveAgreement
//     on the same n headers, so a mismatch (different collective, order, settings or shapes)
//     fails every rank with the same INTERNAL (or INVALID_ARGUMENT) error naming both collectives
//     and ranks. The headers tell r every peer's shapes, so both ends of each transfer agree on
//     its size.
//     Later runs move the data alone, sized by the shapes of the first (a collective reads and
//     writes registers, whose shapes do not change), after r checks its own collective against
//     what every rank agreed on (CheckRerun): that it is the one the communicator's order puts
//     at this position, with the settings, data types and shapes of its own first run. A rank
//     that fails fails at once, before it posts any transfer, with INTERNAL naming both
//     collectives (or the buffer that changed); only it names the mismatch, and its job aborts
//     the others (their waits end at the abort, or at their deadline). Exception: a collective in
//     which some rank receives nothing from some peer (an empty block or slice:
//     EveryRankHearsFromEveryPeer) keeps the headers at every run, since its data would not hold
//     the ranks together (tags, below).
//  2. Data, by direct exchange (not a ring): every transfer goes from the rank that has the bytes
//     to the rank that needs them, all transfers of a phase at once, receives posted before sends.
//     - all-gather: r sends its input to every peer;
//     - all-to-all: r sends slice q of its input to rank q;
//     - reduce-scatter: r sends slice q of its input to rank q (the slice's owner), which reduces
//       the n contributions in rank order 0, 1, ..., n-1;
//     - all-reduce: a reduce-scatter of the flattened elements (owner q gets the q-th balanced
//       chunk, as in SharedMemoryCollectives), then every owner sends its reduced chunk to every
//       peer.
//     Each element starts from rank 0's value and adds ranks 1..n-1 in order, the operations
//     SharedMemoryCollectives performs (runtime/collectives/collective_reduction.h), so the
//     outputs are bit-identical to it.
//
// Staging: receives go straight into the output, and sends straight from the input, where the
// block is contiguous there; other blocks go through staging buffers, kept per rank and reused,
// sized by core/collective_staging.h (the compiler's memory estimate uses it too). They come from
// the rank's device memory (Options::memories) and are charged to its budget when first used: one
// that cannot hold them fails that Run (in the first step) with RESOURCE_EXHAUSTED naming the
// device and the communicator.
//
// Transfer tags (Network::Tag, 64 bits; `kCollectiveTagBit` set), most significant first:
//   bit 63       Network::kCollectiveTagBit
//   bits 46..62  communicator index (plan::Communicator.index), 17 bits
//   bits 30..45  instance: collectives this communicator ran before, modulo 2^16
//   bits 28..29  phase: 0 header, 1 scatter (contributions to owners), 2 gather (moved data)
//   bits 14..27  source rank, 14 bits
//   bits  0..13  destination rank, 14 bits
// Unique per (communicator, instance, phase, source, destination) among the transfers that can be
// in flight at once: a rank finishes collective k only after it received a transfer of k from
// every peer (its header, or its data where the data alone move), so no two ranks are more than
// one collective apart and the instance never wraps onto a live one. Create fails with
// INVALID_ARGUMENT for a communicator with a larger index or more ranks.
//
// Waits end: Abort, and any failure of one of this node's ranks, interrupts every local rank at
// once (Run returns the first reason; every later Run fails at once); a transfer error (a lost
// peer) fails the Run with it; a wait longer than `timeout` (from the start of each phase) fails
// with DEADLINE_EXCEEDED naming the collective and the ranks not heard from.
//
// Buffer contract: completions run on network threads and never block. A Run that returns early
// (abort, failure, deadline) may leave transfers posted: its staging buffers stay alive until
// their completions run, but the caller's input and output buffers (the runtime's registers) are
// read or written by the network until it is stopped: the runtime stops the Network (which
// completes or cancels every transfer) before it frees registers, as it does today.
class NetworkCollectives final : public CollectiveBackend {
 public:
  struct Options {
    // How long a rank waits in one phase of a collective (headers, data) before failing.
    absl::Duration timeout = absl::Seconds(60);
    // How long a waiting rank polls for completions before it parks on a condition variable; 0
    // (park at once) by default. (Why: docs/ARCHITECTURE.md, "Collectives between nodes".)
    absl::Duration spin = absl::ZeroDuration();
    // The memory of each rank on this node, by rank (null for the others): staging buffers come
    // from it and count against its budget. A rank on this node without one gets a memory of its
    // own, without a budget.
    std::vector<std::shared_ptr<DeviceMemory>> memories;
  };

  // The tag layout (see above).
  static constexpr int kRankBits = 14;
  static constexpr int kPhaseBits = 2;
  static constexpr int kInstanceBits = 16;
  static constexpr int kCommunicatorBits = 17;
  static constexpr int kMaxRanks = 1 << kRankBits;
  static constexpr int kMaxCommunicators = 1 << kCommunicatorBits;
  enum class Phase : uint64_t { kHeader = 0, kScatter = 1, kGather = 2 };
  static Network::Tag TransferTag(int communicator_index, int64_t instance, Phase phase, int source,
                                  int destination);

  // The backend of `communicator` on node `node`. INVALID_ARGUMENT when the communicator does not
  // fit the tag layout (or has no ranks), FAILED_PRECONDITION when a rank is not a CPU device.
  // `network` must outlive the backend.
  static absl::StatusOr<std::unique_ptr<NetworkCollectives>> Create(
      const plan::Communicator& communicator, int node, Network* network, Options options);

  const std::string& communicator() const override { return name_; }
  int size() const override { return size_; }
  absl::string_view transport() const override { return "network"; }

  absl::Status Run(const CollectiveCall& call) override;
  void Abort(absl::Status reason) override;

 private:
  struct Collective;
  // Host memory for packed or staged blocks from the rank's device memory, reused across the
  // rank's collectives.
  struct StagingBuffer {
    StagingBuffer(std::shared_ptr<DeviceMemory> memory, std::byte* bytes, size_t size)
        : memory(std::move(memory)), bytes(bytes), size(size) {}
    ~StagingBuffer() { memory->Free(bytes); }
    StagingBuffer(const StagingBuffer&) = delete;
    StagingBuffer& operator=(const StagingBuffer&) = delete;

    const std::shared_ptr<DeviceMemory> memory;
    std::byte* const bytes;
    const size_t size;
  };
  // What a rank learned of a collective it ran (by sequence number) from the first run's headers:
  // its own header, every rank's input shape, and what they imply for this rank.
  struct KnownCollective {
    CollectiveHeader own;  // this rank's at the first run: its data types and shapes
    // Whether later runs move the data alone (EveryRankHearsFromEveryPeer; class comment).
    bool data_only = false;
    std::vector<Shape> input_shapes;     // by rank
    std::vector<int64_t> staging_bytes;  // CollectiveStagingBytes
  };
  struct RankState {
    int64_t instance = 0;  // collectives this rank started; guarded by mutex_
    // The data and header transfers of the collective in progress (no header group where the
    // data move alone); guarded by mutex_.
    std::shared_ptr<TransferGroup> group;
    std::shared_ptr<TransferGroup> header_group;
    // Where its staging buffers come from (ranks on this node only).
    std::shared_ptr<DeviceMemory> memory;
    // Touched by the rank's thread only.
    std::vector<std::shared_ptr<StagingBuffer>> staging;
    // Each collective this rank ran, by sequence number.
    absl::flat_hash_map<int64_t, KnownCollective> known;
  };

  NetworkCollectives(const plan::Communicator& communicator, int node, Network* network,
                     Options options);

  // Under mutex_: the first failure wins; interrupts every rank's collective in progress.
  void FailLocked(absl::Status status);

  absl::Status RunCollective(Collective& collective);
  // A run without headers (collective.known->data_only): this rank's collective is the one the
  // communicator's order puts at this position, with the settings, data types and shapes of its
  // first run; INTERNAL naming both collectives, or the buffer that changed, otherwise.
  absl::Status CheckRerun(const Collective& collective) const;
  // Posts the receives of the peers' headers and sends this rank's to every peer.
  absl::Status SendHeader(Collective& collective);
  // Waits for the peers' headers and checks them: agreement, and the data types and shapes of
  // earlier runs where there were any (otherwise it learns the collective from them).
  absl::Status CheckHeaders(Collective& collective);
  // Records in collective.state.known, and points collective.known at, what every rank's header
  // says of the collective; INVALID_ARGUMENT when the shapes do not fit together.
  absl::Status LearnCollective(Collective& collective,
                               const std::vector<CollectiveHeader>& headers);
  absl::Status RunAllReduce(Collective& collective);
  absl::Status RunReduceScatter(Collective& collective);
  absl::Status RunAllGather(Collective& collective);
  absl::Status RunAllToAll(Collective& collective);
  // Step 1 of both reductions: the owner of each slice along `axis` of `input` gets every rank's
  // contribution and reduces them in rank order into `reduced` (this rank's dense slice).
  absl::Status ReduceToOwners(Collective& collective, const TensorView& input, int axis,
                              float* reduced);

  // The blocks a gather (all-gather, all-to-all) receives: block_from(source) from each peer,
  // placed along `concat_axis` of the output in rank order.
  struct IncomingBlocks {
    std::vector<int64_t> offset;     // by source, along concat_axis (and the total at size_)
    std::vector<int> received;       // the receives' indices (-1: none)
    std::vector<std::byte*> staged;  // the staging buffer a block lands in (null: in place)
  };
  // Posts a receive for each peer's block: straight into the output where the block is contiguous
  // there, into its staging buffer otherwise.
  IncomingBlocks PostBlockReceives(Collective& collective, int concat_axis,
                                   absl::FunctionRef<Shape(int)> block_from);
  // Waits for each staged block and copies it to its place in the output.
  absl::Status PlaceStagedBlocks(Collective& collective, const IncomingBlocks& incoming,
                                 int concat_axis, absl::FunctionRef<Shape(int)> block_from);

  // Post one transfer of `bytes` bytes; nothing (and -1) for an empty one. A transfer that cannot
  // be posted fails the group.
  int PostReceive(Collective& collective, Phase phase, int source, void* buffer, size_t bytes);
  int PostSend(Collective& collective, Phase phase, int destination, const void* buffer,
               size_t bytes);
  // Waits for data transfer `index` (-1: all of them) and turns how the wait ended into a status.
  absl::Status Await(Collective& collective, int index);
  // The same for transfer `index` of `group` (the headers' or the data's).
  absl::Status AwaitTransfer(Collective& collective, TransferGroup& group, int index);
  // Sets collective.staging: the buffers collective.known names, from the rank's kept ones
  // (grown when too small) and kept alive by the collective's group; RESOURCE_EXHAUSTED naming
  // the device and the communicator when the rank's memory budget cannot hold one.
  absl::Status AllocateStaging(Collective& collective);

  const std::string name_;
  const int size_;
  const int num_collectives_;
  const int communicator_index_;
  const int node_;
  Network* const network_;
  const Options options_;
  std::vector<int> node_of_rank_;

  std::mutex mutex_;
  absl::Status failure_;          // guarded by mutex_
  std::vector<RankState> ranks_;  // by rank (only this node's are used)
};

// The runtime's entry point: the network backend of `communicator` (whose ranks span several
// nodes) on node `node`, as a CollectiveBackend. Same errors as NetworkCollectives::Create.
absl::StatusOr<std::unique_ptr<CollectiveBackend>> MakeNetworkCollectives(
    const plan::Communicator& communicator, int node, Network* network,
    NetworkCollectives::Options options = {});

}  // namespace loom

#endif  // LOOM_RUNTIME_COLLECTIVES_NETWORK_COLLECTIVES_H_
