#include "tools/loomctl/fetch_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "tools/loomctl/fetch_directory.h"
#include "tools/loomctl/npy_writer.h"

namespace loom::loomctl {

absl::StatusOr<std::unique_ptr<FetchWriter>> FetchWriter::Create(const std::string& directory,
                                                                 int64_t max_queued_bytes) {
  if (absl::Status status = CreateFetchDirectory(directory); !status.ok()) return status;
  std::unique_ptr<FetchWriter> writer(new FetchWriter(directory, max_queued_bytes));
  writer->writer_ = std::thread([raw = writer.get()] { raw->WriteLoop(); });
  return writer;
}

FetchWriter::~FetchWriter() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  writer_.join();
}

absl::Status FetchWriter::BeginSegment(const plan::Plan& plan) {
  // The evaluation's fetch has pieces in the evaluating steps only: its values are the step
  // lines' validation losses, not files.
  std::vector<const plan::Fetch*> written;
  std::vector<std::string> names;
  for (const plan::Fetch& fetch : plan.fetches()) {
    if (fetch.evaluation()) continue;
    written.push_back(&fetch);
    names.push_back(fetch.tensor());
  }
  if (absl::Status status = CheckFetchedFileNames(names); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  fetches_.clear();
  for (const plan::Fetch* fetch : written) fetches_.emplace_back(*fetch);
  for (const auto& [tensor, written] : pieces_written_) pieces_before_[tensor] += written;
  pieces_written_.clear();
  return absl::OkStatus();
}

absl::Status FetchWriter::OnPiece(const SinkPiece& piece) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!write_error_.ok()) return write_error_;
  for (int index = 0; index < static_cast<int>(fetches_.size()); ++index) {
    FetchPieceAssembler& fetch = fetches_[index];
    absl::StatusOr<std::optional<AssembledPiece>> assembled = fetch.Add(piece);
    if (!assembled.ok()) return assembled.status();
    if (!assembled->has_value()) continue;
    const std::string& tensor = fetch.fetch().tensor();
    const int64_t step = pieces_before_[tensor] + (*assembled)->piece;
    ++pieces_written_[tensor];
    const int64_t bytes = static_cast<int64_t>((*assembled)->tensor.bytes.size());
    // Room for it, unless nothing else is queued (a piece larger than the bound goes alone).
    changed_.wait(lock, [&] {
      return queued_bytes_ == 0 || queued_bytes_ + bytes <= max_queued_bytes_ || !write_error_.ok();
    });
    if (!write_error_.ok()) return write_error_;
    queued_bytes_ += bytes;
    queue_.push_back(QueuedFile{{step, index},
                                FetchedTensorPath(directory_, tensor, step),
                                std::move((*assembled)->tensor)});
    changed_.notify_all();
  }
  return absl::OkStatus();
}

absl::Status FetchWriter::EndSegment() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return (queue_.empty() && !writing_) || !write_error_.ok(); });
  if (!write_error_.ok()) return write_error_;
  for (const FetchPieceAssembler& fetch : fetches_) {
    if (fetch.pending_pieces() > 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("fetch '", fetch.fetch().tensor(), "': ", fetch.pending_pieces(),
                       " pieces never reached every rank's sink, so they were not written"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> FetchWriter::sinks() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> sinks;
  for (const FetchPieceAssembler& fetch : fetches_) {
    sinks.insert(sinks.end(), fetch.fetch().sinks().begin(), fetch.fetch().sinks().end());
  }
  return sinks;
}

std::vector<std::string> FetchWriter::paths() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> paths;
  for (const auto& [order, path] : paths_) paths.push_back(path);
  return paths;
}

void FetchWriter::WriteLoop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return !queue_.empty() || stopping_; });
    // Stopping: what is queued is still written (pieces the run completed).
    if (queue_.empty()) return;
    QueuedFile file = std::move(queue_.front());
    queue_.pop_front();
    // After a failed write the run fails: the files queued after it are not written.
    const bool write = write_error_.ok();
    writing_ = true;
    lock.unlock();
    const absl::Status written = write ? WriteNpyFile(file.tensor, file.path) : absl::OkStatus();
    lock.lock();
    writing_ = false;
    queued_bytes_ -= static_cast<int64_t>(file.tensor.bytes.size());
    if (!written.ok()) write_error_ = written;
    if (write && written.ok()) paths_.emplace(file.order, std::move(file.path));
    changed_.notify_all();
  }
}

}  // namespace loom::loomctl
