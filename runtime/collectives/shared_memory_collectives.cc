#include "runtime/collectives/shared_memory_collectives.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/balanced_split.h"
#include "core/collective_shapes.h"
#include "glog/logging.h"
#include "runtime/block_copy.h"
#include "runtime/collectives/collective_agreement.h"
#include "runtime/collectives/collective_reduction.h"

namespace loom {
namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

SharedMemoryCollectives::SharedMemoryCollectives(const plan::Communicator& communicator,
                                                 Options options)
    : name_(communicator.name()),
      size_(communicator.devices_size()),
      num_collectives_(communicator.num_collectives()),
      options_(options),
      calls_(size_, nullptr),
      has_departed_(size_, false) {}

void SharedMemoryCollectives::FailLocked(absl::Status status) {
  if (failure_.ok()) {
    failure_ = std::move(status);
    failed_.store(true, std::memory_order_release);
  }
  changed_.notify_all();
}

void SharedMemoryCollectives::Abort(absl::Status reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!failure_.ok()) return;
  FailLocked(absl::AbortedError(
      absl::StrCat("communicator '", name_, "' was aborted: ", reason.message())));
}

std::string SharedMemoryCollectives::RankList(const std::vector<bool>& done) {
  std::vector<int> missing;
  for (int rank = 0; rank < static_cast<int>(done.size()); ++rank) {
    if (!done[rank]) missing.push_back(rank);
  }
  return absl::StrCat(missing.size() == 1 ? "rank " : "ranks ", absl::StrJoin(missing, ", "));
}

void SharedMemoryCollectives::Spin(const std::atomic<int64_t>& counter, int64_t generation) const {
  if (options_.spin <= absl::ZeroDuration()) return;
  const auto until = Clock::now() + absl::ToChronoNanoseconds(options_.spin);
  while (counter.load(std::memory_order_acquire) <= generation &&
         !failed_.load(std::memory_order_acquire) && Clock::now() < until) {
  }
}

absl::Status SharedMemoryCollectives::CheckCallsLocked(int64_t generation) const {
  std::vector<CollectiveSignature> signatures(size_);
  for (int rank = 0; rank < size_; ++rank) {
    const CollectiveCall& call = *calls_[rank];
    signatures[rank] = CollectiveSignature{call.conf, call.input.data_type, call.input.shape,
                                           call.output.data_type, call.output.shape};
  }
  return CheckCollectiveAgreement(name_, num_collectives_, generation, signatures);
}

absl::Status SharedMemoryCollectives::Run(const CollectiveCall& call) {
  const int rank = call.rank;
  if (rank < 0 || rank >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("communicator '", name_, "' has ", size_, " ranks, so it has no rank ", rank));
  }
  const plan::CollectiveConf& conf = *call.conf;
  const auto timeout = absl::ToChronoNanoseconds(options_.timeout);
  auto deadline = Clock::now() + timeout;

  // 1. Arrival.
  std::unique_lock<std::mutex> lock(mutex_);
  if (!failure_.ok()) return failure_;
  const int64_t generation = departures_completed_.load(std::memory_order_relaxed);
  if (calls_[rank] != nullptr) {
    FailLocked(absl::InternalError(
        absl::StrCat("communicator '", name_, "': rank ", rank, " enters collective ",
                     DescribeCollective(conf), " while it is still inside ",
                     DescribeCollective(*calls_[rank]->conf), " (two threads run one rank)")));
    return failure_;
  }
  calls_[rank] = &call;
  if (++arrived_ == size_) {
    arrived_ = 0;
    if (absl::Status check = CheckCallsLocked(generation); !check.ok()) {
      FailLocked(std::move(check));
      return failure_;
    }
    arrivals_completed_.store(generation + 1, std::memory_order_release);
    changed_.notify_all();
  } else {
    lock.unlock();
    Spin(arrivals_completed_, generation);
    lock.lock();
    while (arrivals_completed_.load(std::memory_order_relaxed) <= generation && failure_.ok()) {
      if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
          arrivals_completed_.load(std::memory_order_relaxed) <= generation && failure_.ok()) {
        std::vector<bool> arrived(size_);
        for (int peer = 0; peer < size_; ++peer) arrived[peer] = calls_[peer] != nullptr;
        FailLocked(absl::DeadlineExceededError(absl::StrCat(
            "communicator '", name_, "': collective ", DescribeCollective(conf), " on rank ", rank,
            " waited ", absl::FormatDuration(options_.timeout), " at piece ", call.piece, " for ",
            RankList(arrived),
            " to arrive (does a peer never get its input, or do the ranks run different numbers "
            "of pieces?)")));
      }
    }
    // Once every rank arrived, a later abort does not stop this collective: peers may already
    // read this rank's buffers.
    if (arrivals_completed_.load(std::memory_order_relaxed) <= generation) return failure_;
  }

  // 2. Compute. calls_ stays as it is until every rank has departed.
  lock.unlock();
  Compute(rank);

  // 3. Departure.
  lock.lock();
  has_departed_[rank] = true;
  if (++departed_ == size_) {
    departed_ = 0;
    std::fill(calls_.begin(), calls_.end(), nullptr);
    std::fill(has_departed_.begin(), has_departed_.end(), false);
    departures_completed_.store(generation + 1, std::memory_order_release);
    changed_.notify_all();
    return absl::OkStatus();
  }
  lock.unlock();
  Spin(departures_completed_, generation);
  lock.lock();
  deadline = Clock::now() + timeout;
  while (departures_completed_.load(std::memory_order_relaxed) <= generation) {
    if (changed_.wait_until(lock, deadline) == std::cv_status::timeout &&
        departures_completed_.load(std::memory_order_relaxed) <= generation) {
      FailLocked(absl::DeadlineExceededError(absl::StrCat(
          "communicator '", name_, "': collective ", DescribeCollective(conf), " on rank ", rank,
          " waited ", absl::FormatDuration(options_.timeout), " at piece ", call.piece, " for ",
          RankList(has_departed_), " to finish it")));
      return failure_;
    }
  }
  return absl::OkStatus();
}

void SharedMemoryCollectives::Compute(int rank) const {
  const CollectiveCall& own = *calls_[rank];
  const plan::CollectiveConf& conf = *own.conf;
  const TensorView& output = own.output;
  const int axis = conf.axis();
  switch (conf.kind()) {
    case plan::ALL_REDUCE: {
      // This rank reduces its balanced chunk of the elements and writes it to every output.
      const AxisRange chunk = BalancedRange(output.NumElements(), size_, rank);
      if (chunk.size() == 0) return;
      float* reduced = output.Data<float>() + chunk.begin;
      std::memcpy(reduced, calls_[0]->input.Data<float>() + chunk.begin,
                  static_cast<size_t>(chunk.size()) * sizeof(float));
      for (int source = 1; source < size_; ++source) {
        CombineInto(conf.reduce(), reduced, calls_[source]->input.Data<float>() + chunk.begin,
                    chunk.size());
      }
      for (int peer = 0; peer < size_; ++peer) {
        if (peer == rank) continue;
        std::memcpy(calls_[peer]->output.Data<float>() + chunk.begin, reduced,
                    static_cast<size_t>(chunk.size()) * sizeof(float));
      }
      return;
    }
    case plan::REDUCE_SCATTER: {
      // Every input has one shape; this rank reduces its balanced slice along `axis`.
      const Shape& input_shape = own.input.shape;
      const AxisRange range = BalancedRange(input_shape.dimension(axis), size_, rank);
      const auto source_origin = AxisOrigin(input_shape.rank(), axis, range.begin);
      const auto destination_origin = AxisOrigin(output.shape.rank(), axis, 0);
      float* out = output.Data<float>();
      ForEachBlockRun(output.shape, input_shape, source_origin, output.shape, destination_origin,
                      [&](int64_t source_offset, int64_t destination_offset, int64_t count) {
                        std::memcpy(out + destination_offset,
                                    calls_[0]->input.Data<float>() + source_offset,
                                    static_cast<size_t>(count) * sizeof(float));
                        for (int source = 1; source < size_; ++source) {
                          CombineInto(conf.reduce(), out + destination_offset,
                                      calls_[source]->input.Data<float>() + source_offset, count);
                        }
                      });
      return;
    }
    case plan::ALL_GATHER: {
      const auto source_origin = AxisOrigin(output.shape.rank(), axis, 0);
      int64_t offset = 0;
      for (int source = 0; source < size_; ++source) {
        const TensorView& input = calls_[source]->input;
        CopyBlock(input, source_origin, output, AxisOrigin(output.shape.rank(), axis, offset),
                  input.shape);
        offset += input.shape.dimension(axis);
      }
      return;
    }
    case plan::ALL_TO_ALL: {
      const int concat_axis = conf.concat_axis();
      int64_t offset = 0;
      for (int source = 0; source < size_; ++source) {
        const TensorView& input = calls_[source]->input;
        const AxisRange range = BalancedRange(input.shape.dimension(axis), size_, rank);
        Shape block = input.shape;
        block.set_dimension(axis, range.size());
        CopyBlock(input, AxisOrigin(input.shape.rank(), axis, range.begin), output,
                  AxisOrigin(output.shape.rank(), concat_axis, offset), block);
        offset += block.dimension(concat_axis);
      }
      return;
    }
    default:
      LOG(FATAL) << "communicator '" << name_ << "': unchecked collective kind " << conf.kind();
  }
}

}  // namespace loom
