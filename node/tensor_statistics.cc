#include "node/tensor_statistics.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/data_type.h"
#include "kernels/cpu/cast_kernel.h"

namespace loom {
namespace {

// The running sums of ComputeStatistics.
struct RunningStatistics {
  double sum = 0;
  double max_abs = 0;
  bool saw_nan = false;
};

// Reads `count` elements of type T from `bytes` and folds them into `statistics`.
template <typename T, typename Convert>
void Accumulate(const std::vector<std::byte>& bytes, int64_t count, Convert convert,
                RunningStatistics* statistics) {
  for (int64_t i = 0; i < count; ++i) {
    T raw;
    std::memcpy(&raw, bytes.data() + i * sizeof(T), sizeof(T));
    double value = convert(raw);
    if (std::isnan(value)) statistics->saw_nan = true;
    statistics->sum += value;
    statistics->max_abs = std::max(statistics->max_abs, std::fabs(value));
  }
}

// Accumulate for a type whose values convert to double as they are.
template <typename T>
void AccumulateNumbers(const std::vector<std::byte>& bytes, int64_t count,
                       RunningStatistics* statistics) {
  Accumulate<T>(
      bytes, count, [](T x) { return static_cast<double>(x); }, statistics);
}

}  // namespace

absl::StatusOr<TensorStatistics> ComputeStatistics(const HostTensor& tensor) {
  TensorStatistics statistics;
  statistics.elements = tensor.shape.NumElements();
  const int64_t element_size = DataTypeSize(tensor.data_type);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a tensor of data type ", plan::DataType_Name(tensor.data_type)));
  }
  if (tensor.bytes.size() != static_cast<size_t>(statistics.elements * element_size)) {
    return absl::InvalidArgumentError(absl::StrCat("a ", DataTypeName(tensor.data_type),
                                                   " tensor of shape ", tensor.shape.ToString(),
                                                   " holds ", tensor.bytes.size(), " bytes"));
  }
  if (statistics.elements == 0) {
    statistics.mean = statistics.max_abs = std::numeric_limits<double>::quiet_NaN();
    return statistics;
  }
  RunningStatistics running;
  const int64_t count = statistics.elements;
  switch (tensor.data_type) {
    case plan::FLOAT32:
      AccumulateNumbers<float>(tensor.bytes, count, &running);
      break;
    case plan::INT32:
      AccumulateNumbers<int32_t>(tensor.bytes, count, &running);
      break;
    case plan::INT64:
      AccumulateNumbers<int64_t>(tensor.bytes, count, &running);
      break;
    case plan::UINT8:
      AccumulateNumbers<uint8_t>(tensor.bytes, count, &running);
      break;
    case plan::UINT16:
      AccumulateNumbers<uint16_t>(tensor.bytes, count, &running);
      break;
    case plan::BFLOAT16:
      Accumulate<uint16_t>(tensor.bytes, count, cpu::Bfloat16ToFloat32, &running);
      break;
    default:
      break;
  }
  statistics.mean = running.sum / static_cast<double>(count);
  statistics.max_abs = running.saw_nan ? std::numeric_limits<double>::quiet_NaN() : running.max_abs;
  return statistics;
}

}  // namespace loom
