#include "kernels/cpu/data/token_dataset_kernel.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/data/batch_window.h"
#include "kernels/cpu/data/token_dataset.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "token_dataset";

absl::Status Prefixed(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(kOpType, ": ", status.message()));
}

absl::StatusOr<TokenDatasetSpec> ParseDataset(const plan::KernelConf& conf, int64_t sequence) {
  Attributes attributes(conf);
  absl::StatusOr<std::vector<std::string>> paths = attributes.GetStringList("paths");
  if (!paths.ok()) return WithOpType(kOpType, paths.status());
  absl::StatusOr<std::vector<int64_t>> counts = attributes.GetIntList("path_counts");
  if (!counts.ok()) return WithOpType(kOpType, counts.status());
  absl::StatusOr<std::vector<std::string>> formats = attributes.GetStringList("formats");
  if (!formats.ok()) return WithOpType(kOpType, formats.status());
  std::vector<double> weights(counts->size(), 1.0);
  if (attributes.Has("weights")) {
    absl::StatusOr<std::vector<double>> given = attributes.GetFloatList("weights");
    if (!given.ok()) return WithOpType(kOpType, given.status());
    weights = *std::move(given);
  }
  if (counts->empty() || formats->size() != counts->size() || weights.size() != counts->size()) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": 'path_counts', 'formats' and 'weights' need one entry per source, got ",
        counts->size(), ", ", formats->size(), " and ", weights.size()));
  }
  TokenDatasetSpec spec;
  spec.sequence = sequence;
  size_t next = 0;
  for (size_t source = 0; source < counts->size(); ++source) {
    const int64_t count = (*counts)[source];
    if (count < 1 || static_cast<uint64_t>(count) > paths->size() - next) {
      return absl::InvalidArgumentError(absl::StrCat(kOpType, ": 'path_counts' entry ", source,
                                                     " is ", count, ", but ", paths->size() - next,
                                                     " of the ", paths->size(), " paths are left"));
    }
    TokenSourceSpec& entry = spec.sources.emplace_back();
    entry.paths.assign(paths->begin() + static_cast<std::ptrdiff_t>(next),
                       paths->begin() + static_cast<std::ptrdiff_t>(next + count));
    next += static_cast<size_t>(count);
    absl::StatusOr<TokenFormat> format = ParseTokenFormat((*formats)[source]);
    if (!format.ok())
      return Prefixed(
          absl::Status(format.status().code(),
                       absl::StrCat("source ", source, ": ", format.status().message())));
    entry.format = *format;
    entry.weight = weights[source];
  }
  if (next != paths->size()) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType, ": 'path_counts' covers ", next,
                                                   " of the ", paths->size(), " paths"));
  }
  if (attributes.Has("end_of_text")) {
    absl::StatusOr<int64_t> end_of_text = attributes.GetInt("end_of_text");
    if (!end_of_text.ok()) return WithOpType(kOpType, end_of_text.status());
    if (*end_of_text < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": attribute 'end_of_text' must be >= 0, got ", *end_of_text));
    }
    spec.end_of_text = *end_of_text;
  }
  absl::StatusOr<bool> in_order = attributes.GetBool("in_order", false);
  if (!in_order.ok()) return WithOpType(kOpType, in_order.status());
  spec.in_order = *in_order;
  absl::StatusOr<int64_t> seed = attributes.GetInt("seed", 0);
  if (!seed.ok()) return WithOpType(kOpType, seed.status());
  spec.seed = static_cast<uint64_t>(*seed);
  return spec;
}

class TokenDatasetKernel : public Kernel {
 public:
  TokenDatasetKernel(const KernelInit& init, BatchWindow window,
                     std::unique_ptr<TokenDataset> dataset)
      : signature_(init), window_(window), dataset_(std::move(dataset)) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (context.piece < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": piece must be >= 0, got ", context.piece));
    }
    // g = t * B + i must fit int64: t <= (max - B) / B.
    const uint64_t batch = window_.BatchOf(context.piece);
    const int64_t largest_batch =
        (std::numeric_limits<int64_t>::max() - window_.global_batch) / window_.global_batch;
    if (batch > static_cast<uint64_t>(largest_batch)) {
      return absl::OutOfRangeError(absl::StrCat(
          kOpType, ": batch ", batch, " of piece ", context.piece,
          " is beyond the last batch whose samples a 64-bit index numbers (", largest_batch, ")"));
    }
    const int64_t first_sample =
        static_cast<int64_t>(batch) * window_.global_batch + window_.FirstSampleOf(context.piece);
    for (int64_t row = 0; row < window_.samples_per_piece; ++row) {
      for (size_t output = 0; output < context.outputs.size(); ++output) {
        const bool targets = context.outputs.size() == 2 ? output == 1 : window_.targets;
        status = context.outputs[output].data_type == plan::INT32
                     ? CopyRow<int32_t>(context.outputs[output], row, first_sample + row, targets,
                                        tokens32_, held32_)
                     : CopyRow<int64_t>(context.outputs[output], row, first_sample + row, targets,
                                        tokens64_, held64_);
        if (!status.ok()) return Prefixed(status);
      }
    }
    return absl::OkStatus();
  }

 private:
  // `tokens` holds the sample of `held` (-1: none), so that x and y of one row read it once.
  template <typename T>
  absl::Status CopyRow(const TensorView& output, int64_t row, int64_t sample, bool targets,
                       std::vector<T>& tokens, int64_t& held) {
    if (held != sample) {
      held = -1;
      if (absl::Status status = dataset_->ReadSample(sample, tokens); !status.ok()) return status;
      held = sample;
    }
    const int64_t sequence = window_.sequence;
    std::copy_n(tokens.begin() + (targets ? 1 : 0), sequence, output.Data<T>() + row * sequence);
    return absl::OkStatus();
  }

  TensorSignature signature_;
  BatchWindow window_;
  std::unique_ptr<TokenDataset> dataset_;
  std::vector<int32_t> tokens32_;
  std::vector<int64_t> tokens64_;
  int64_t held32_ = -1;
  int64_t held64_ = -1;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateTokenDatasetKernel(const KernelInit& init) {
  const int num_outputs = NumBatchOutputs(init);
  absl::Status status = CheckArity(kOpType, init, 0, num_outputs);
  if (!status.ok()) return status;
  absl::StatusOr<BatchWindow> window = ParseBatchWindow(kOpType, *init.conf, num_outputs);
  if (!window.ok()) return window.status();
  status = CheckBatchOutputs(kOpType, init, *window);
  if (!status.ok()) return status;
  absl::StatusOr<TokenDatasetSpec> spec = ParseDataset(*init.conf, window->sequence);
  if (!spec.ok()) return spec.status();
  if (init.files == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(kOpType, ": cannot open the dataset's files: this run may open no files"));
  }
  absl::StatusOr<std::unique_ptr<TokenDataset>> dataset =
      TokenDataset::Open(*init.files, *spec, init.ending);
  if (!dataset.ok()) return Prefixed(dataset.status());
  return std::make_unique<TokenDatasetKernel>(init, *window, *std::move(dataset));
}

}  // namespace loom::cpu
