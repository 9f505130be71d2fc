#include "kernels/cpu/data/token_batch_kernel.h"

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/file_roots.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/data/batch_window.h"
#include "kernels/cpu/data/token_reading.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "token_batch";

absl::Status Prefixed(const absl::Status& status) {
  return absl::Status(status.code(), absl::StrCat(kOpType, ": ", status.message()));
}

// (a * b) mod m for a, b < m.
uint64_t MultiplyMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) % m);
}

// The token file is opened for the kernel's lifetime and read with pread (never mapped: a file
// truncated while the job reads it fails the job naming the file, it cannot kill the process).
class TokenBatchKernel : public Kernel {
 public:
  TokenBatchKernel(const KernelInit& init, BatchWindow window, ReadableFile file,
                   TokenFormat format, int64_t num_tokens)
      : signature_(init),
        ending_(init.ending),
        window_(window),
        file_(std::move(file)),
        format_(format),
        modulus_(static_cast<uint64_t>(num_tokens - window.sequence - 1)) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (context.piece < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": piece must be >= 0, got ", context.piece));
    }
    const int64_t first_sample = window_.FirstSampleOf(context.piece);
    const uint64_t m = modulus_;
    // t mod m for the batch t of the piece.
    const uint64_t step_mod = window_.BatchOf(context.piece) % m;
    // (t * B) mod m; each sample adds i, then the whole is scaled by T.
    const uint64_t step_base =
        MultiplyMod(step_mod, static_cast<uint64_t>(window_.global_batch) % m, m);
    const uint64_t sequence_mod = static_cast<uint64_t>(window_.sequence) % m;
    std::string buffer;
    for (int64_t row = 0; row < window_.samples_per_piece; ++row) {
      const uint64_t sample = static_cast<uint64_t>(first_sample + row) % m;
      const int64_t offset =
          static_cast<int64_t>(MultiplyMod((step_base + sample) % m, sequence_mod, m));
      if (context.outputs.size() == 2) {
        status = CopyRow(context.outputs[0], row, offset, buffer);
        if (status.ok()) status = CopyRow(context.outputs[1], row, offset + 1, buffer);
      } else {
        status = CopyRow(context.outputs[0], row, window_.targets ? offset + 1 : offset, buffer);
      }
      if (!status.ok()) return Prefixed(status);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CopyRow(const TensorView& output, int64_t row, int64_t begin,
                       std::string& buffer) const {
    const int64_t sequence = window_.sequence;
    if (output.data_type == plan::INT32) {
      return ReadTokens(file_, format_, begin, sequence, output.Data<int32_t>() + row * sequence,
                        buffer, ending_);
    }
    return ReadTokens(file_, format_, begin, sequence, output.Data<int64_t>() + row * sequence,
                      buffer, ending_);
  }

  TensorSignature signature_;
  // KernelInit::ending: a read stops once the job is ending.
  const std::atomic<bool>* ending_;
  BatchWindow window_;
  ReadableFile file_;
  TokenFormat format_;
  // N - T - 1 >= 1: the number of distinct sample offsets.
  uint64_t modulus_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateTokenBatchKernel(const KernelInit& init) {
  // Two outputs (x, y), or one (x, or y with "targets").
  const int num_outputs = NumBatchOutputs(init);
  absl::Status status = CheckArity(kOpType, init, 0, num_outputs);
  if (!status.ok()) return status;
  Attributes attributes(*init.conf);
  absl::StatusOr<std::string> path = attributes.GetString("path");
  if (!path.ok()) return WithOpType(kOpType, path.status());
  absl::StatusOr<std::string> format_name = attributes.GetString("format", "bytes");
  if (!format_name.ok()) return WithOpType(kOpType, format_name.status());
  absl::StatusOr<TokenFormat> format = ParseTokenFormat(*format_name);
  if (!format.ok()) return Prefixed(format.status());
  absl::StatusOr<BatchWindow> window = ParseBatchWindow(kOpType, *init.conf, num_outputs);
  if (!window.ok()) return window.status();
  status = CheckBatchOutputs(kOpType, init, *window);
  if (!status.ok()) return status;

  if (init.files == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat(kOpType, ": cannot open token file '", *path,
                                                    "': this run may open no files"));
  }
  absl::StatusOr<ReadableFile> file = init.files->OpenForReading(*path);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat(kOpType, ": token file: ", file.status().message()));
  }
  absl::StatusOr<int64_t> num_tokens = CountTokens(*file, *format);
  if (!num_tokens.ok()) return Prefixed(num_tokens.status());
  if (*num_tokens - 2 < window->sequence) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": token file '", *path, "' holds ", *num_tokens, " tokens but sequence ",
        window->sequence, " needs at least ", window->sequence + 2));
  }
  return std::make_unique<TokenBatchKernel>(init, *window, *std::move(file), *format, *num_tokens);
}

}  // namespace loom::cpu
