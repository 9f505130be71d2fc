#ifndef LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_H_
#define LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_H_

// TokenDataset: the samples of a token dataset (docs/DATA.md): sources of token files split into
// documents, each source's documents and samples shuffled per epoch, and a blend of the sources by
// weight; the tokens of global sample g read from the files with pread.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/file_roots.h"
#include "kernels/cpu/data/dataset_sampling.h"
#include "kernels/cpu/data/token_reading.h"

namespace loom::cpu {

struct TokenSourceSpec {
  // Files, directories or patterns (FileRoots::ListFiles).
  std::vector<std::string> paths;
  TokenFormat format = TokenFormat::kBytes;
  // > 0 (the blend's share).
  double weight = 1;
};

struct TokenDatasetSpec {
  std::vector<TokenSourceSpec> sources;
  std::optional<int64_t> end_of_text;
  bool in_order = false;
  uint64_t seed = 0;
  // T: tokens per sample are T + 1 (x and y overlap in T - 1).
  int64_t sequence = 0;
};

// Not thread-safe: one kernel's acts run one at a time.
class TokenDataset {
 public:
  // Lists and opens the sources' files beneath `files` and finds their documents (reading every
  // file once when end_of_text is set; stopped with CANCELLED once `ending` is set). Errors name
  // the source (by index) and the file or path: refused, missing, empty, not a whole number of
  // tokens, named twice, or a source shorter than sequence + 1 tokens.
  static absl::StatusOr<std::unique_ptr<TokenDataset>> Open(const FileRoots& files,
                                                            const TokenDatasetSpec& spec,
                                                            const std::atomic<bool>* ending);

  ~TokenDataset();

  // The sequence + 1 tokens of global sample g >= 0 into `tokens`. Errors name the file (DATA_LOSS
  // when it was truncated since it was opened; INVALID_ARGUMENT for a uint32 token beyond T).
  template <typename T>
  absl::Status ReadSample(int64_t g, std::vector<T>& tokens);

  // For tests and messages.
  int num_sources() const;
  int64_t num_documents(int source) const;
  int64_t num_tokens(int source) const;
  int64_t samples_per_epoch(int source) const;
  // The source global sample g comes from.
  int SourceOf(int64_t g) const { return blend_.Choose(g).source; }

 private:
  class Source;

  TokenDataset(std::vector<std::unique_ptr<Source>> sources, BlendPattern blend,
               const std::atomic<bool>* ending);

  std::vector<std::unique_ptr<Source>> sources_;
  BlendPattern blend_;
  const std::atomic<bool>* ending_;
};

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_DATA_TOKEN_DATASET_H_
