#include "kernels/cpu/random_kernel.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/counter_random.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "random";
constexpr char kRandomIntegers[] = "random_integers";

enum class Distribution { kUniform, kNormal };

// The counters of the output's elements, planned once: the output is a window of a logical tensor
// whose row-major element index (plus an offset) is the counter. Neighbouring axes are merged
// where the window spans the whole inner axis, so that runs of consecutive counters are long.
class CounterWindow {
 public:
  // The whole output is the logical tensor: counters offset, offset + 1, ...
  static CounterWindow Contiguous(int64_t count, uint64_t offset) {
    CounterWindow window;
    window.dimensions_.push_back(count);
    window.strides_.push_back(1);
    window.base_ = offset;
    window.count_ = count;
    return window;
  }

  // The window [begin, begin + output) of a tensor of `logical` (all of one rank, in bounds).
  static CounterWindow Slice(const Shape& output, const std::vector<int64_t>& logical,
                             const std::vector<int64_t>& begin, uint64_t offset) {
    CounterWindow window;
    window.count_ = output.NumElements();
    window.base_ = offset;
    std::vector<uint64_t> strides(output.rank(), 1);
    for (int axis = output.rank() - 2; axis >= 0; --axis) {
      strides[axis] = strides[axis + 1] * static_cast<uint64_t>(logical[axis + 1]);
    }
    for (int axis = 0; axis < output.rank(); ++axis) {
      window.base_ += static_cast<uint64_t>(begin[axis]) * strides[axis];
      const int64_t dimension = output.dimension(axis);
      // The previous (outer) axis steps over exactly this axis's extent: one run.
      if (!window.dimensions_.empty() &&
          window.strides_.back() == strides[axis] * static_cast<uint64_t>(dimension)) {
        window.dimensions_.back() *= dimension;
        window.strides_.back() = strides[axis];
        continue;
      }
      window.dimensions_.push_back(dimension);
      window.strides_.push_back(strides[axis]);
    }
    if (window.dimensions_.empty()) {
      window.dimensions_.push_back(1);
      window.strides_.push_back(1);
    }
    return window;
  }

  // Calls run(first_output_index, first_counter, length) for each run of consecutive counters,
  // in output order.
  template <typename Run>
  void ForEachRun(Run&& run) const {
    if (count_ == 0) return;
    int64_t output_index = 0;
    Walk(0, base_, output_index, run);
  }

 private:
  template <typename Run>
  void Walk(size_t axis, uint64_t counter, int64_t& output_index, Run& run) const {
    const int64_t dimension = dimensions_[axis];
    if (axis + 1 == dimensions_.size()) {
      run(output_index, counter, dimension);
      output_index += dimension;
      return;
    }
    for (int64_t i = 0; i < dimension; ++i) {
      Walk(axis + 1, counter + static_cast<uint64_t>(i) * strides_[axis], output_index, run);
    }
  }

  // Output dimensions (merged), outermost first, and the counter step along each; the innermost
  // step is always 1.
  absl::InlinedVector<int64_t, 6> dimensions_;
  absl::InlinedVector<uint64_t, 6> strides_;
  uint64_t base_ = 0;
  int64_t count_ = 0;
};

// What "random" and "random_integers" share: the stream and where the output lies in it.
struct StreamOptions {
  uint64_t seed = 0;
  bool same_every_piece = false;
  // Piece p is step first_step + p of the stream (a resumed job continues it).
  uint64_t first_step = 0;
  CounterWindow window;

  uint64_t Key(int64_t piece) const {
    return RandomStreamKey(seed, same_every_piece ? 0 : first_step + static_cast<uint64_t>(piece));
  }
};

std::string DescribeList(const std::vector<int64_t>& values) {
  return absl::StrCat("[", absl::StrJoin(values, ", "), "]");
}

// "seed", "offset", "same_every_piece", "first_step", "logical_shape" and "slice_begin" for an
// output of `output`.
absl::StatusOr<StreamOptions> ParseStream(const char* op_type, const plan::KernelConf& conf,
                                          const Shape& output) {
  Attributes attributes(conf);
  StreamOptions options;
  absl::StatusOr<int64_t> seed = attributes.GetInt("seed");
  if (!seed.ok()) return WithOpType(op_type, seed.status());
  options.seed = static_cast<uint64_t>(*seed);

  absl::StatusOr<int64_t> offset = attributes.GetInt("offset", 0);
  if (!offset.ok()) return WithOpType(op_type, offset.status());
  if (*offset < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'offset' must be >= 0, got ", *offset));
  }

  absl::StatusOr<bool> same_every_piece = attributes.GetBool("same_every_piece", false);
  if (!same_every_piece.ok()) return WithOpType(op_type, same_every_piece.status());
  options.same_every_piece = *same_every_piece;

  absl::StatusOr<int64_t> first_step = attributes.GetInt("first_step", 0);
  if (!first_step.ok()) return WithOpType(op_type, first_step.status());
  if (*first_step < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'first_step' must be >= 0, got ", *first_step));
  }
  options.first_step = static_cast<uint64_t>(*first_step);

  if (!attributes.Has("logical_shape")) {
    if (attributes.Has("slice_begin")) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": attribute 'slice_begin' needs 'logical_shape'"));
    }
    options.window = CounterWindow::Contiguous(output.NumElements(), *offset);
    return options;
  }
  absl::StatusOr<std::vector<int64_t>> logical = attributes.GetIntList("logical_shape");
  if (!logical.ok()) return WithOpType(op_type, logical.status());
  const int rank = output.rank();
  if (static_cast<int>(logical->size()) != rank) {
    return absl::InvalidArgumentError(
        absl::StrCat(op_type, ": attribute 'logical_shape' ", DescribeList(*logical), " has rank ",
                     logical->size(), " but the output ", output.ToString(), " has rank ", rank));
  }
  std::vector<int64_t> begin(rank, 0);
  if (attributes.Has("slice_begin")) {
    absl::StatusOr<std::vector<int64_t>> given = attributes.GetIntList("slice_begin");
    if (!given.ok()) return WithOpType(op_type, given.status());
    if (static_cast<int>(given->size()) != rank) {
      return absl::InvalidArgumentError(absl::StrCat(op_type, ": attribute 'slice_begin' ",
                                                     DescribeList(*given), " has ", given->size(),
                                                     " entries but the output has rank ", rank));
    }
    begin = *std::move(given);
  }
  for (int axis = 0; axis < rank; ++axis) {
    if (begin[axis] < 0 || (*logical)[axis] < 0 ||
        begin[axis] > (*logical)[axis] - output.dimension(axis)) {
      return absl::InvalidArgumentError(
          absl::StrCat(op_type, ": the output window at slice_begin ", DescribeList(begin),
                       " of shape ", output.ToString(), " does not lie inside logical_shape ",
                       DescribeList(*logical), " (axis ", axis, ")"));
    }
  }
  options.window = CounterWindow::Slice(output, *logical, begin, *offset);
  return options;
}

struct RandomOptions {
  StreamOptions stream;
  Distribution distribution = Distribution::kUniform;
  // Uniform: low + (high - low) * u. Normal: mean + std * z (stored in the same two fields).
  double location = 0.0;
  double scale = 1.0;
};

class RandomKernel : public Kernel {
 public:
  RandomKernel(const KernelInit& init, RandomOptions options)
      : signature_(init), options_(std::move(options)) {
    if (options_.distribution == Distribution::kUniform) {
      // Rounding to float could reach `high`; the largest float below it is used instead.
      const float low = static_cast<float>(options_.location);
      const float high = static_cast<float>(options_.location + options_.scale);
      uniform_upper_bound_ =
          high > low ? std::nextafter(high, -std::numeric_limits<float>::infinity()) : low;
    }
  }

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    const uint64_t key = options_.stream.Key(context.piece);
    float* output = context.outputs[0].Data<float>();
    const double location = options_.location;
    const double scale = options_.scale;
    if (options_.distribution == Distribution::kUniform) {
      const float upper_bound = uniform_upper_bound_;
      options_.stream.window.ForEachRun([&](int64_t start, uint64_t counter, int64_t length) {
        float* run = output + start;
        for (int64_t i = 0; i < length; ++i) {
          const double u = UniformFromBits(RandomBits(key, counter + i, 0));
          const float value = static_cast<float>(location + scale * u);
          run[i] = value < upper_bound ? value : upper_bound;
        }
      });
    } else {
      options_.stream.window.ForEachRun([&](int64_t start, uint64_t counter, int64_t length) {
        float* run = output + start;
        for (int64_t i = 0; i < length; ++i) {
          run[i] = static_cast<float>(location + scale * StandardNormal(key, counter + i));
        }
      });
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

absl::StatusOr<RandomOptions> ParseOptions(const plan::KernelConf& conf, const Shape& output) {
  Attributes attributes(conf);
  RandomOptions options;
  absl::StatusOr<StreamOptions> stream = ParseStream(kOpType, conf, output);
  if (!stream.ok()) return stream.status();
  options.stream = *std::move(stream);

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

template <typename T>
class RandomIntegersKernel : public Kernel {
 public:
  RandomIntegersKernel(const KernelInit& init, StreamOptions stream, uint64_t high)
      : signature_(init), stream_(std::move(stream)), high_(high) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kRandomIntegers, context);
    if (!status.ok()) return status;
    const uint64_t key = stream_.Key(context.piece);
    const uint64_t high = high_;
    T* output = context.outputs[0].Data<T>();
    stream_.window.ForEachRun([&](int64_t start, uint64_t counter, int64_t length) {
      T* run = output + start;
      for (int64_t i = 0; i < length; ++i) {
        run[i] = static_cast<T>(BoundedFromBits(RandomBits(key, counter + i, 0), high));
      }
    });
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  StreamOptions stream_;
  uint64_t high_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 0, 1);
  if (!status.ok()) return status;
  status = CheckAllFloat32(kOpType, init);
  if (!status.ok()) return status;
  absl::StatusOr<RandomOptions> options =
      ParseOptions(*init.conf, Shape::FromProto(init.outputs[0]));
  if (!options.ok()) return options.status();
  return std::make_unique<RandomKernel>(init, *std::move(options));
}

absl::StatusOr<std::unique_ptr<Kernel>> CreateRandomIntegersKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kRandomIntegers, init, 0, 1);
  if (!status.ok()) return status;
  const plan::DataType data_type = init.outputs[0].data_type();
  if (data_type != plan::INT32 && data_type != plan::INT64) {
    return absl::InvalidArgumentError(absl::StrCat(
        kRandomIntegers, ": output must be int32 or int64, got ", DataTypeName(data_type)));
  }
  absl::StatusOr<StreamOptions> stream =
      ParseStream(kRandomIntegers, *init.conf, Shape::FromProto(init.outputs[0]));
  if (!stream.ok()) return stream.status();
  absl::StatusOr<int64_t> high = Attributes(*init.conf).GetInt("high");
  if (!high.ok()) return WithOpType(kRandomIntegers, high.status());
  const int64_t limit =
      data_type == plan::INT32 ? int64_t{1} << 31 : std::numeric_limits<int64_t>::max();
  if (*high < 1 || *high > limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(kRandomIntegers, ": attribute 'high' must be in [1, ", limit, "] for ",
                     DataTypeName(data_type), ", got ", *high));
  }
  if (data_type == plan::INT32) {
    return std::make_unique<RandomIntegersKernel<int32_t>>(init, *std::move(stream),
                                                           static_cast<uint64_t>(*high));
  }
  return std::make_unique<RandomIntegersKernel<int64_t>>(init, *std::move(stream),
                                                         static_cast<uint64_t>(*high));
}

}  // namespace loom::cpu
