#include "client/loomctl/fetch_writer.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "client/loomctl/fetch_directory.h"
#include "client/loomctl/npy_writer.h"

namespace loom::loomctl {

absl::StatusOr<std::unique_ptr<FetchWriter>> FetchWriter::Create(const std::string& directory) {
  if (absl::Status status = CreateFetchDirectory(directory); !status.ok()) return status;
  return std::unique_ptr<FetchWriter>(new FetchWriter(directory));
}

absl::Status FetchWriter::BeginSegment(const plan::Plan& plan) {
  std::vector<std::string> names;
  for (const plan::Fetch& fetch : plan.fetches()) names.push_back(fetch.tensor());
  if (absl::Status status = CheckFetchedFileNames(names); !status.ok()) return status;
  std::lock_guard<std::mutex> lock(mutex_);
  fetches_.clear();
  for (const plan::Fetch& fetch : plan.fetches()) fetches_.emplace_back(fetch);
  for (const auto& [tensor, written] : pieces_written_) pieces_before_[tensor] += written;
  pieces_written_.clear();
  return absl::OkStatus();
}

absl::Status FetchWriter::OnPiece(const SinkPiece& piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (int index = 0; index < static_cast<int>(fetches_.size()); ++index) {
    FetchPieceAssembler& fetch = fetches_[index];
    absl::StatusOr<std::optional<AssembledPiece>> assembled = fetch.Add(piece);
    if (!assembled.ok()) return assembled.status();
    if (!assembled->has_value()) continue;
    const std::string& tensor = fetch.fetch().tensor();
    const int64_t step = pieces_before_[tensor] + (*assembled)->piece;
    std::string path = FetchedTensorPath(directory_, tensor, step);
    if (absl::Status status = WriteNpyFile((*assembled)->tensor, path); !status.ok()) {
      return status;
    }
    ++pieces_written_[tensor];
    paths_.emplace(std::make_pair(step, index), std::move(path));
  }
  return absl::OkStatus();
}

absl::Status FetchWriter::EndSegment() {
  std::lock_guard<std::mutex> lock(mutex_);
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

}  // namespace loom::loomctl
