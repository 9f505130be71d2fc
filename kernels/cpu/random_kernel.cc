#include "kernels/cpu/random_kernel.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"
#include "kernels/cpu/counter_random.h"
#include "kernels/cpu/kernel_checks.h"
#include "runtime/tensor.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "random";

enum class Distribution { kUniform, kNormal };

struct RandomOptions {
  uint64_t seed = 0;
  Distribution distribution = Distribution::kUniform;
  // Uniform: low + (high - low) * u. Normal: mean + std * z (stored in the same two fields).
  double location = 0.0;
  double scale = 1.0;
  uint64_t offset = 0;
  bool same_every_piece = false;
};

class RandomKernel : public Kernel {
 public:
  RandomKernel(const KernelInit& init, const RandomOptions& options)
      : signature_(init), options_(options) {
    if (options.distribution == Distribution::kUniform) {
      // Rounding to float could reach `high`; the largest float below it is used instead.
      const float low = static_cast<float>(options.location);
      const float high = static_cast<float>(options.location + options.scale);
      uniform_upper_bound_ =
          high > low ? std::nextafter(high, -std::numeric_limits<float>::infinity()) : low;
    }
  }

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const uint64_t piece = options_.same_every_piece ? 0 : static_cast<uint64_t>(context.piece);
    const uint64_t key = RandomStreamKey(options_.seed, piece);
    float* output = context.outputs[0].Data<float>();
    const int64_t count = context.outputs[0].NumElements();
    const double location = options_.location;
    const double scale = options_.scale;
    if (options_.distribution == Distribution::kUniform) {
      const float upper_bound = uniform_upper_bound_;
      for (int64_t i = 0; i < count; ++i) {
        const double u = UniformFromBits(RandomBits(key, options_.offset + i, 0));
        const float value = static_cast<float>(location + scale * u);
        output[i] = value < upper_bound ? value : upper_bound;
      }
    } else {
      for (int64_t i = 0; i < count; ++i) {
        output[i] = static_cast<float>(location + scale * StandardNormal(key, options_.offset + i));
      }
    }
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  RandomOptions options_;
  float uniform_upper_bound_ = 0.0f;
};

// A finite float attribute with a default.
absl::StatusOr<double> FiniteFloat(const Attributes& attributes, const std::string& name,
                                   double default_value) {
  absl::StatusOr<double> value = attributes.GetFloat(name, default_value);
  if (!value.ok()) return WithOpType(kOpType, value.status());
  if (!std::isfinite(*value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute '", name, "' must be finite, got ", *value));
  }
  return *value;
}

absl::StatusOr<RandomOptions> ParseOptions(const plan::KernelConf& conf) {
  Attributes attributes(conf);
  RandomOptions options;
  absl::StatusOr<int64_t> seed = attributes.GetInt("seed");
  if (!seed.ok()) return WithOpType(kOpType, seed.status());
  options.seed = static_cast<uint64_t>(*seed);

  absl::StatusOr<int64_t> offset = attributes.GetInt("offset", 0);
  if (!offset.ok()) return WithOpType(kOpType, offset.status());
  if (*offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'offset' must be >= 0, got ", *offset));
  }
  options.offset = static_cast<uint64_t>(*offset);

  absl::StatusOr<bool> same_every_piece = attributes.GetBool("same_every_piece", false);
  if (!same_every_piece.ok()) return WithOpType(kOpType, same_every_piece.status());
  options.same_every_piece = *same_every_piece;

  absl::StatusOr<std::string> distribution = attributes.GetString("distribution", "uniform");
  if (!distribution.ok()) return WithOpType(kOpType, distribution.status());
  const char* foreign_attributes[2];
  if (*distribution == "uniform") {
    options.distribution = Distribution::kUniform;
    absl::StatusOr<double> low = FiniteFloat(attributes, "low", 0.0);
    if (!low.ok()) return low.status();
    absl::StatusOr<double> high = FiniteFloat(attributes, "high", 1.0);
    if (!high.ok()) return high.status();
    if (*low > *high) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": attribute 'low' (", *low, ") is above 'high' (", *high, ")"));
    }
    options.location = *low;
    options.scale = *high - *low;
    foreign_attributes[0] = "mean";
    foreign_attributes[1] = "std";
  } else if (*distribution == "normal") {
    options.distribution = Distribution::kNormal;
    absl::StatusOr<double> mean = FiniteFloat(attributes, "mean", 0.0);
    if (!mean.ok()) return mean.status();
    absl::StatusOr<double> standard_deviation = FiniteFloat(attributes, "std", 1.0);
    if (!standard_deviation.ok()) return standard_deviation.status();
    if (*standard_deviation < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kOpType, ": attribute 'std' must be >= 0, got ", *standard_deviation));
    }
    options.location = *mean;
    options.scale = *standard_deviation;
    foreign_attributes[0] = "low";
    foreign_attributes[1] = "high";
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        kOpType, ": attribute 'distribution' must be \"uniform\" or \"normal\", got \"",
        *distribution, "\""));
  }
  // An attribute of the other distribution is most likely a mistake in the plan.
  for (const char* name : foreign_attributes) {
    if (attributes.Has(name)) {
      return absl::InvalidArgumentError(absl::StrCat(kOpType, ": attribute '", name,
                                                     "' does not apply to distribution \"",
                                                     *distribution, "\""));
    }
  }
  return options;
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 0, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kOpType, init);
  if (!status.ok()) return status;
  absl::StatusOr<RandomOptions> options = ParseOptions(*init.conf);
  if (!options.ok()) return options.status();
  return std::make_unique<RandomKernel>(init, *options);
}

}  // namespace loom::cpu
