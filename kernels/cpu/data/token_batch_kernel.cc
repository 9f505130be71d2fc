#include "kernels/cpu/data/token_batch_kernel.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/file_roots.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "token_batch";

enum class TokenFormat { kBytes, kUint16, kUint32 };

// Bytes per token of a format.
int64_t WidthOf(TokenFormat format) {
  switch (format) {
    case TokenFormat::kUint16:
      return 2;
    case TokenFormat::kUint32:
      return 4;
    default:
      return 1;
  }
}

// A token file opened for the kernel's lifetime and read with pread (never mapped: a file truncated
// while the job reads it fails the job naming the file, it cannot kill the process).
class TokenFile {
 public:
  static absl::StatusOr<std::unique_ptr<TokenFile>> Open(const FileRoots* files,
                                                         const std::string& path,
                                                         TokenFormat format) {
    if (files == nullptr) {
      return absl::PermissionDeniedError(absl::StrCat(kOpType, ": cannot open token file '", path,
                                                      "': this run may open no files"));
    }
    absl::StatusOr<ReadableFile> file = files->OpenForReading(path);
    if (!file.ok()) {
      return absl::Status(file.status().code(),
                          absl::StrCat(kOpType, ": token file: ", file.status().message()));
    }
    if (file->size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": token file '", path, "' is empty"));
    }
    if (file->size() % WidthOf(format) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": token file '", path, "' has ", file->size(),
                       " bytes, which is not a whole number of ",
                       format == TokenFormat::kUint16 ? "uint16" : "uint32", " tokens"));
    }
    return std::unique_ptr<TokenFile>(new TokenFile(*std::move(file), format));
  }

  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return file_.path(); }

  int64_t num_tokens() const { return file_.size() / WidthOf(format_); }

  // Tokens [begin, begin + count) into `output` (the caller keeps them in range of the file as
  // it was opened), read through `buffer`. DATA_LOSS naming the file when it was truncated since;
  // CANCELLED once `ending` is set.
  template <typename T>
  absl::Status Copy(int64_t begin, int64_t count, T* output, std::string& buffer,
                    const std::atomic<bool>* ending) const {
    const int64_t width = WidthOf(format_);
    buffer.resize(static_cast<size_t>(count * width));
    if (absl::Status status =
            file_.ReadAt(begin * width, absl::Span<char>(buffer.data(), buffer.size()), ending);
        !status.ok()) {
      return absl::Status(status.code(), absl::StrCat(kOpType, ": ", status.message()));
    }
    const auto* tokens = reinterpret_cast<const uint8_t*>(buffer.data());
    if (format_ == TokenFormat::kBytes) {
      for (int64_t k = 0; k < count; ++k) output[k] = static_cast<T>(tokens[k]);
    } else if (format_ == TokenFormat::kUint16) {
      for (int64_t k = 0; k < count; ++k) {
        output[k] = static_cast<T>(static_cast<uint32_t>(tokens[2 * k]) |
                                   (static_cast<uint32_t>(tokens[2 * k + 1]) << 8));
      }
    } else {
      for (int64_t k = 0; k < count; ++k) {
        const uint32_t token = static_cast<uint32_t>(tokens[4 * k]) |
                               (static_cast<uint32_t>(tokens[4 * k + 1]) << 8) |
                               (static_cast<uint32_t>(tokens[4 * k + 2]) << 16) |
                               (static_cast<uint32_t>(tokens[4 * k + 3]) << 24);
        if (token > static_cast<uint32_t>(std::numeric_limits<T>::max())) {
          return absl::InvalidArgumentError(
              absl::StrCat(kOpType, ": token file '", file_.path(), "' holds token ", token,
                           " at token ", begin + k, ", beyond the output's integer type"));
        }
        output[k] = static_cast<T>(token);
      }
    }
    return absl::OkStatus();
  }

 private:
  TokenFile(ReadableFile file, TokenFormat format) : file_(std::move(file)), format_(format) {}

  ReadableFile file_;
  TokenFormat format_;
};

struct BatchOptions {
  std::string path;
  TokenFormat format = TokenFormat::kBytes;
  int64_t global_batch = 0;
  int64_t sequence = 0;
  int64_t sample_begin = 0;
  int64_t sample_count = 0;
  int64_t micro_batches = 1;
  // The steps taken before piece 0 (a resumed job): piece p is step first_step + p / M.
  int64_t first_step = 0;
  // The one-output form: true when its output is y (the targets), false when it is x.
  bool targets = false;
  // sample_count / micro_batches: the rows of each output.
  int64_t samples_per_piece = 0;
};

absl::StatusOr<BatchOptions> ParseOptions(const plan::KernelConf& conf, int num_outputs) {
  Attributes attributes(conf);
  BatchOptions options;
  absl::StatusOr<std::string> path = attributes.GetString("path");
  if (!path.ok()) return WithOpType(kOpType, path.status());
  options.path = *std::move(path);

  absl::StatusOr<std::string> format = attributes.GetString("format", "bytes");
  if (!format.ok()) return WithOpType(kOpType, format.status());
  if (*format == "bytes") {
    options.format = TokenFormat::kBytes;
  } else if (*format == "uint16") {
    options.format = TokenFormat::kUint16;
  } else if (*format == "uint32") {
    options.format = TokenFormat::kUint32;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": attribute 'format' must be \"bytes\", \"uint16\" or \"uint32\", got \"",
        *format, "\""));
  }

  absl::StatusOr<int64_t> global_batch = attributes.GetInt("global_batch");
  if (!global_batch.ok()) return WithOpType(kOpType, global_batch.status());
  absl::StatusOr<int64_t> sequence = attributes.GetInt("sequence");
  if (!sequence.ok()) return WithOpType(kOpType, sequence.status());
  if (*global_batch < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'global_batch' must be >= 1, got ", *global_batch));
  }
  if (*sequence < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'sequence' must be >= 1, got ", *sequence));
  }
  options.global_batch = *global_batch;
  options.sequence = *sequence;

  absl::StatusOr<int64_t> sample_begin = attributes.GetInt("sample_begin", 0);
  if (!sample_begin.ok()) return WithOpType(kOpType, sample_begin.status());
  absl::StatusOr<int64_t> sample_count = attributes.GetInt("sample_count", *global_batch);
  if (!sample_count.ok()) return WithOpType(kOpType, sample_count.status());
  if (*sample_begin < 0 || *sample_count < 0 || *sample_begin > *global_batch ||
      *sample_count > *global_batch - *sample_begin) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": sample_begin ", *sample_begin, " and sample_count ", *sample_count,
                     " do not select a window of the global batch of ", *global_batch, " samples"));
  }
  options.sample_begin = *sample_begin;
  options.sample_count = *sample_count;

  absl::StatusOr<int64_t> micro_batches = attributes.GetInt("micro_batches", 1);
  if (!micro_batches.ok()) return WithOpType(kOpType, micro_batches.status());
  if (*micro_batches < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'micro_batches' must be >= 1, got ", *micro_batches));
  }
  if (options.sample_count % *micro_batches != 0) {
    return absl::InvalidArgumentError(absl::StrCat(kOpType, ": sample_count ", options.sample_count,
                                                   " is not divisible by micro_batches ",
                                                   *micro_batches));
  }
  options.micro_batches = *micro_batches;
  options.samples_per_piece = options.sample_count / options.micro_batches;

  absl::StatusOr<int64_t> first_step = attributes.GetInt("first_step", 0);
  if (!first_step.ok()) return WithOpType(kOpType, first_step.status());
  if (*first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'first_step' must be >= 0, got ", *first_step));
  }
  options.first_step = *first_step;

  if (num_outputs == 2 && attributes.Has("targets")) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType,
        ": attribute 'targets' selects the output of the one-output form, but this task "
        "has two outputs (x and y)"));
  }
  absl::StatusOr<bool> targets = attributes.GetBool("targets", false);
  if (!targets.ok()) return WithOpType(kOpType, targets.status());
  options.targets = *targets;
  return options;
}

// (a * b) mod m for a, b < m.
uint64_t MultiplyMod(uint64_t a, uint64_t b, uint64_t m) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(a) * b) % m);
}

class TokenBatchKernel : public Kernel {
 public:
  TokenBatchKernel(const KernelInit& init, BatchOptions options, std::unique_ptr<TokenFile> file)
      : signature_(init),
        ending_(init.ending),
        options_(std::move(options)),
        file_(std::move(file)),
        modulus_(static_cast<uint64_t>(file_->num_tokens() - options_.sequence - 1)) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    if (context.piece < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": piece must be >= 0, got ", context.piece));
    }
    const int64_t micro_batch = context.piece % options_.micro_batches;
    const int64_t first_sample = options_.sample_begin + micro_batch * options_.samples_per_piece;
    const int64_t sequence = options_.sequence;
    const uint64_t m = modulus_;
    // t mod m for t = first_step + piece / M, which may exceed int64 for a huge first_step.
    const uint64_t step_mod = (static_cast<uint64_t>(options_.first_step) % m +
                               static_cast<uint64_t>(context.piece / options_.micro_batches) % m) %
                              m;
    // (t * B) mod m; each sample adds i, then the whole is scaled by T.
    const uint64_t step_base =
        MultiplyMod(step_mod, static_cast<uint64_t>(options_.global_batch) % m, m);
    const uint64_t sequence_mod = static_cast<uint64_t>(sequence) % m;
    std::string buffer;
    for (int64_t row = 0; row < options_.samples_per_piece; ++row) {
      const uint64_t sample = static_cast<uint64_t>(first_sample + row) % m;
      const int64_t offset =
          static_cast<int64_t>(MultiplyMod((step_base + sample) % m, sequence_mod, m));
      if (context.outputs.size() == 2) {
        status = CopyRow(context.outputs[0], row, offset, buffer);
        if (status.ok()) status = CopyRow(context.outputs[1], row, offset + 1, buffer);
      } else {
        status = CopyRow(context.outputs[0], row, options_.targets ? offset + 1 : offset, buffer);
      }
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CopyRow(const TensorView& output, int64_t row, int64_t begin,
                       std::string& buffer) const {
    const int64_t sequence = options_.sequence;
    if (output.data_type == plan::INT32) {
      return file_->Copy(begin, sequence, output.Data<int32_t>() + row * sequence, buffer, ending_);
    }
    return file_->Copy(begin, sequence, output.Data<int64_t>() + row * sequence, buffer, ending_);
  }

  TensorSignature signature_;
  // KernelInit::ending: a read stops once the job is ending.
  const std::atomic<bool>* ending_;
  BatchOptions options_;
  std::unique_ptr<TokenFile> file_;
  // N - T - 1 >= 1: the number of distinct sample offsets.
  uint64_t modulus_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateTokenBatchKernel(const KernelInit& init) {
  // Two outputs (x, y), or one (x, or y with "targets").
  const int num_outputs = init.outputs.size() == 1 ? 1 : 2;
  absl::Status status = CheckArity(kOpType, init, 0, num_outputs);
  if (!status.ok()) return status;
  absl::StatusOr<BatchOptions> options = ParseOptions(*init.conf, num_outputs);
  if (!options.ok()) return options.status();

  const Shape expected({options->samples_per_piece, options->sequence});
  const char* const kNames[] = {"x", "y"};
  for (int index = 0; index < num_outputs; ++index) {
    const char* name = num_outputs == 1 && options->targets ? kNames[1] : kNames[index];
    const plan::TensorDesc& desc = init.outputs[index];
    if (desc.data_type() != plan::INT32 && desc.data_type() != plan::INT64) {
      return absl::InvalidArgumentError(absl::StrCat(kOpType, ": output '", name,
                                                     "' must be int32 or int64, got ",
                                                     DataTypeName(desc.data_type())));
    }
    const Shape shape = Shape::FromProto(desc);
    if (shape != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          kOpType, ": output '", name, "' is ", DescribeTensor(desc),
          " but must be [sample_count / micro_batches, sequence] = ", expected.ToString()));
    }
  }

  absl::StatusOr<std::unique_ptr<TokenFile>> file =
      TokenFile::Open(init.files, options->path, options->format);
  if (!file.ok()) return file.status();
  const int64_t num_tokens = (*file)->num_tokens();
  if (num_tokens - 2 < options->sequence) {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": token file '", options->path, "' holds ", num_tokens, " tokens but sequence ",
        options->sequence, " needs at least ", options->sequence + 2));
  }
  return std::make_unique<TokenBatchKernel>(init, *std::move(options), *std::move(file));
}

}  // namespace loom::cpu
