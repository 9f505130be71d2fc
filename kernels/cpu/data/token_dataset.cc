#include "kernels/cpu/data/token_dataset.h"

#include <algorithm>
#include <limits>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"

namespace loom::cpu {
namespace {

// Open files a source keeps (a dataset of many shards would otherwise hold a descriptor per file
// per kernel); the least recently read one is closed first.
constexpr size_t kOpenFilesPerSource = 8;

// Tokens read at a time while looking for documents.
constexpr int64_t kScanChunkTokens = int64_t{1} << 20;

struct SourceFile {
  std::string path;
  // Its first token's position in the source's stream, and its tokens.
  int64_t begin = 0;
  int64_t tokens = 0;
};

}  // namespace

// One source: its files as one stream of N tokens split into documents, and the order of the
// epoch it is in.
class TokenDataset::Source {
 public:
  Source(int index, const FileRoots& files, TokenFormat format, std::vector<SourceFile> list,
         std::vector<int64_t> document_starts, uint64_t seed, bool in_order, int64_t sequence)
      : index_(index),
        files_(files),
        format_(format),
        list_(std::move(list)),
        document_starts_(std::move(document_starts)),
        seed_(seed),
        in_order_(in_order),
        sequence_(sequence),
        samples_per_epoch_((document_starts_.back() - 1) / sequence) {}

  int64_t num_documents() const { return static_cast<int64_t>(document_starts_.size()) - 1; }
  int64_t num_tokens() const { return document_starts_.back(); }
  int64_t samples_per_epoch() const { return samples_per_epoch_; }
  int64_t sequence() const { return sequence_; }

  // The source's k-th sample: sequence + 1 tokens.
  template <typename T>
  absl::Status ReadSample(int64_t k, T* tokens, const std::atomic<bool>* ending) {
    const int64_t epoch = k / samples_per_epoch_;
    const int64_t position = k % samples_per_epoch_;
    int64_t sample = position;
    if (!in_order_) {
      sample = static_cast<int64_t>(Permutation(
          static_cast<uint64_t>(samples_per_epoch_),
          HashValues({seed_, static_cast<uint64_t>(index_), static_cast<uint64_t>(epoch),
                      kShuffleSamples}))(static_cast<uint64_t>(position)));
      EnterEpoch(epoch);
    }
    return ReadEpochTokens(sample * sequence_, sequence_ + 1, tokens, ending);
  }

 private:
  // Builds the document order and offsets of `epoch` unless they are the current ones.
  void EnterEpoch(int64_t epoch) {
    if (epoch == cached_epoch_) return;
    const int64_t documents = num_documents();
    const Permutation order(static_cast<uint64_t>(documents),
                            HashValues({seed_, static_cast<uint64_t>(index_),
                                        static_cast<uint64_t>(epoch), kShuffleDocuments}));
    epoch_order_.resize(documents);
    epoch_starts_.resize(documents + 1);
    epoch_starts_[0] = 0;
    for (int64_t q = 0; q < documents; ++q) {
      const int64_t document = static_cast<int64_t>(order(static_cast<uint64_t>(q)));
      epoch_order_[q] = document;
      epoch_starts_[q + 1] =
          epoch_starts_[q] + document_starts_[document + 1] - document_starts_[document];
    }
    cached_epoch_ = epoch;
  }

  // Tokens [begin, begin + count) of the current epoch's stream (the files' order when in order).
  template <typename T>
  absl::Status ReadEpochTokens(int64_t begin, int64_t count, T* tokens,
                               const std::atomic<bool>* ending) {
    while (count > 0) {
      int64_t stream_position = begin;
      int64_t run = count;
      if (!in_order_) {
        // The epoch's document q holding `begin`, and where that is in the files.
        const auto after = std::upper_bound(epoch_starts_.begin(), epoch_starts_.end(), begin);
        const int64_t q = (after - epoch_starts_.begin()) - 1;
        const int64_t document = epoch_order_[q];
        const int64_t within = begin - epoch_starts_[q];
        stream_position = document_starts_[document] + within;
        run = std::min(count, document_starts_[document + 1] - stream_position);
      }
      // The file holding stream_position (a document never spans files).
      const auto after = std::upper_bound(
          list_.begin(), list_.end(), stream_position,
          [](int64_t position, const SourceFile& file) { return position < file.begin; });
      const int64_t file_index = (after - list_.begin()) - 1;
      const SourceFile& file = list_[file_index];
      run = std::min(run, file.begin + file.tokens - stream_position);
      absl::StatusOr<const ReadableFile*> opened = OpenFile(file_index);
      if (!opened.ok()) return opened.status();
      if (absl::Status status = ReadTokens(**opened, format_, stream_position - file.begin, run,
                                           tokens, buffer_, ending);
          !status.ok()) {
        return status;
      }
      tokens += run;
      begin += run;
      count -= run;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<const ReadableFile*> OpenFile(int64_t file_index) {
    for (size_t k = 0; k < open_.size(); ++k) {
      if (open_[k].first != file_index) continue;
      std::rotate(open_.begin(), open_.begin() + static_cast<std::ptrdiff_t>(k),
                  open_.begin() + static_cast<std::ptrdiff_t>(k) + 1);
      return &open_.front().second;
    }
    absl::StatusOr<ReadableFile> file = files_.OpenForReading(list_[file_index].path);
    if (!file.ok()) return file.status();
    if (open_.size() == kOpenFilesPerSource) open_.pop_back();
    open_.emplace(open_.begin(), file_index, *std::move(file));
    return &open_.front().second;
  }

  const int index_;
  const FileRoots& files_;
  const TokenFormat format_;
  const std::vector<SourceFile> list_;
  // D + 1 entries: document d is stream tokens [document_starts_[d], document_starts_[d + 1]).
  const std::vector<int64_t> document_starts_;
  const uint64_t seed_;
  const bool in_order_;
  const int64_t sequence_;
  const int64_t samples_per_epoch_;

  int64_t cached_epoch_ = -1;
  // The current epoch's documents in order, and where each starts in its stream (D + 1 entries).
  std::vector<int64_t> epoch_order_;
  std::vector<int64_t> epoch_starts_;
  // Recently read files, the most recent first.
  std::vector<std::pair<int64_t, ReadableFile>> open_;
  std::string buffer_;
};

namespace {

absl::Status InSource(int source, const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat("source ", source, ": ", status.message()));
}

// Appends to `starts` the starts of the documents of `file` (whose first token is stream position
// `begin`) after its first one: the token after each end_of_text that is not the file's last.
absl::Status FindDocuments(const ReadableFile& file, TokenFormat format, int64_t begin,
                           int64_t tokens, int64_t end_of_text, std::vector<int64_t>& starts,
                           const std::atomic<bool>* ending) {
  std::vector<int64_t> chunk;
  std::string buffer;
  for (int64_t at = 0; at < tokens; at += kScanChunkTokens) {
    const int64_t count = std::min(kScanChunkTokens, tokens - at);
    chunk.resize(count);
    if (absl::Status status = ReadTokens(file, format, at, count, chunk.data(), buffer, ending);
        !status.ok()) {
      return status;
    }
    for (int64_t k = 0; k < count; ++k) {
      if (chunk[k] == end_of_text && at + k + 1 < tokens) starts.push_back(begin + at + k + 1);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TokenDataset>> TokenDataset::Open(const FileRoots& files,
                                                                 const TokenDatasetSpec& spec,
                                                                 const std::atomic<bool>* ending) {
  if (spec.sources.empty()) return absl::InvalidArgumentError("a token dataset needs a source");
  if (spec.sequence < 1) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", spec.sequence, " is not >= 1"));
  }
  std::vector<double> weights;
  std::vector<std::unique_ptr<Source>> sources;
  for (int index = 0; index < static_cast<int>(spec.sources.size()); ++index) {
    const TokenSourceSpec& source = spec.sources[index];
    if (source.paths.empty()) return InSource(index, absl::InvalidArgumentError("no paths"));
    weights.push_back(source.weight);
    std::vector<SourceFile> list;
    std::set<std::string> seen;
    std::vector<int64_t> starts;
    int64_t total = 0;
    for (const std::string& path : source.paths) {
      absl::StatusOr<std::vector<std::string>> listed = files.ListFiles(path);
      if (!listed.ok()) return InSource(index, listed.status());
      for (const std::string& name : *listed) {
        if (!seen.insert(name).second) {
          return InSource(index, absl::InvalidArgumentError(absl::StrCat(
                                     "token file '", name, "' is named twice (by '", path, "')")));
        }
        absl::StatusOr<ReadableFile> file = files.OpenForReading(name);
        if (!file.ok()) return InSource(index, file.status());
        absl::StatusOr<int64_t> tokens = CountTokens(*file, source.format);
        if (!tokens.ok()) return InSource(index, tokens.status());
        starts.push_back(total);
        if (spec.end_of_text.has_value()) {
          if (absl::Status status = FindDocuments(*file, source.format, total, *tokens,
                                                  *spec.end_of_text, starts, ending);
              !status.ok()) {
            return InSource(index, status);
          }
        }
        list.push_back(SourceFile{name, total, *tokens});
        if (*tokens > std::numeric_limits<int64_t>::max() - total) {
          return InSource(index, absl::InvalidArgumentError("more than 2^63 tokens"));
        }
        total += *tokens;
      }
    }
    starts.push_back(total);
    if (total < spec.sequence + 1) {
      return InSource(index, absl::InvalidArgumentError(absl::StrCat(
                                 "its files (", absl::StrJoin(source.paths, ", "), ") hold ", total,
                                 " tokens, but a sample of sequence ", spec.sequence, " needs ",
                                 spec.sequence + 1)));
    }
    sources.push_back(std::make_unique<Source>(index, files, source.format, std::move(list),
                                               std::move(starts), spec.seed, spec.in_order,
                                               spec.sequence));
  }
  absl::StatusOr<BlendPattern> blend = BlendPattern::Create(weights);
  if (!blend.ok()) return blend.status();
  return std::unique_ptr<TokenDataset>(
      new TokenDataset(std::move(sources), *std::move(blend), ending));
}

TokenDataset::TokenDataset(std::vector<std::unique_ptr<Source>> sources, BlendPattern blend,
                           const std::atomic<bool>* ending)
    : sources_(std::move(sources)), blend_(std::move(blend)), ending_(ending) {}

TokenDataset::~TokenDataset() = default;

template <typename T>
absl::Status TokenDataset::ReadSample(int64_t g, std::vector<T>& tokens) {
  const BlendPattern::Pick pick = blend_.Choose(g);
  Source& source = *sources_[pick.source];
  tokens.resize(static_cast<size_t>(source.sequence() + 1));
  absl::Status status = source.ReadSample(pick.index, tokens.data(), ending_);
  if (!status.ok() && sources_.size() > 1) return InSource(pick.source, status);
  return status;
}

template absl::Status TokenDataset::ReadSample<int32_t>(int64_t, std::vector<int32_t>&);
template absl::Status TokenDataset::ReadSample<int64_t>(int64_t, std::vector<int64_t>&);

int TokenDataset::num_sources() const { return static_cast<int>(sources_.size()); }
int64_t TokenDataset::num_documents(int source) const { return sources_[source]->num_documents(); }
int64_t TokenDataset::num_tokens(int source) const { return sources_[source]->num_tokens(); }
int64_t TokenDataset::samples_per_epoch(int source) const {
  return sources_[source]->samples_per_epoch();
}

}  // namespace loom::cpu
