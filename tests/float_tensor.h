#ifndef LOOM_TESTS_FLOAT_TENSOR_H_
#define LOOM_TESTS_FLOAT_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace loom::testing {

// A float32 host tensor of shape [values.size()] holding `values`.
inline HostTensor FloatTensor(const std::vector<float>& values) {
  HostTensor tensor;
  tensor.data_type = plan::FLOAT32;
  tensor.shape = Shape({static_cast<int64_t>(values.size())});
  tensor.bytes.resize(values.size() * sizeof(float));
  std::memcpy(tensor.bytes.data(), values.data(), tensor.bytes.size());
  return tensor;
}

}  // namespace loom::testing

#endif  // LOOM_TESTS_FLOAT_TENSOR_H_
