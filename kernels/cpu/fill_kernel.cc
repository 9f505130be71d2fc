#include "kernels/cpu/fill_kernel.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "fill";

template <typename T>
class FillKernel : public Kernel {
 public:
  FillKernel(const KernelInit& init, T value) : signature_(init), value_(value) {}

  absl::Status Compute(const KernelContext& context) override {
    absl::Status status = signature_.Check(kOpType, context);
    if (!status.ok()) return status;
    T* output = context.outputs[0].Data<T>();
    std::fill(output, output + context.outputs[0].NumElements(), value_);
    return absl::OkStatus();
  }

 private:
  TensorSignature signature_;
  T value_;
};

// The attribute "value" as an integer of type T, exactly.
template <typename T>
absl::StatusOr<T> IntegerValue(const plan::KernelConf& conf, plan::DataType data_type) {
  Attributes attributes(conf);
  int64_t value = 0;
  auto iterator = conf.attributes().find("value");
  if (iterator != conf.attributes().end() && iterator->second.has_int_value()) {
    value = iterator->second.int_value();
  } else {
    absl::StatusOr<double> number = attributes.GetFloat("value", 0.0);
    if (!number.ok()) return WithOpType(kOpType, number.status());
    // 2^63 is exactly representable; anything at or above it (or NaN) does not fit in int64.
    if (!(std::trunc(*number) == *number && *number >= -9223372036854775808.0 &&
          *number < 9223372036854775808.0)) {
      return absl::InvalidArgumentError(absl::StrCat(kOpType, ": value ", *number,
                                                     " is not a whole number that fits in ",
                                                     DataTypeName(data_type)));
    }
    value = static_cast<int64_t>(*number);
  }
  if (value < std::numeric_limits<T>::min() || value > std::numeric_limits<T>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": value ", value, " does not fit in ", DataTypeName(data_type)));
  }
  return static_cast<T>(value);
}

template <typename T>
absl::StatusOr<std::unique_ptr<Kernel>> MakeIntegerFill(const KernelInit& init) {
  absl::StatusOr<T> value = IntegerValue<T>(*init.conf, init.outputs[0].data_type());
  if (!value.ok()) return value.status();
  return std::make_unique<FillKernel<T>>(init, *value);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateFillKernel(const KernelInit& init) {
  absl::Status status = CheckArity(kOpType, init, 0, 1);
  if (!status.ok()) return status;
  const plan::DataType data_type = init.outputs[0].data_type();
  switch (data_type) {
    case plan::FLOAT32: {
      absl::StatusOr<double> value = Attributes(*init.conf).GetFloat("value", 0.0);
      if (!value.ok()) return WithOpType(kOpType, value.status());
      return std::make_unique<FillKernel<float>>(init, static_cast<float>(*value));
    }
    case plan::INT32:
      return MakeIntegerFill<int32_t>(init);
    case plan::INT64:
      return MakeIntegerFill<int64_t>(init);
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          kOpType, ": output must be float32, int32 or int64, got ", DataTypeName(data_type)));
  }
}

}  // namespace loom::cpu
