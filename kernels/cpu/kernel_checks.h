#ifndef LOOM_KERNELS_CPU_KERNEL_CHECKS_H_
#define LOOM_KERNELS_CPU_KERNEL_CHECKS_H_

// The checks that the CPU kernel factories share (arity, data types, shapes; messages start with
// the op type), helpers for messages and strides (DescribeTensor, DescribeIndex, RowMajorStrides),
// and TensorSignature, which Compute checks each act's tensors against. The CUDA kernels and the
// matmul checks use them too.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "core/tensor.h"
#include "kernels/kernel.h"
#include "proto/plan.pb.h"

namespace loom::cpu {

// Checks shared by the CPU kernel factories. Every message starts with the op type ("matmul: ...");
// the registry adds the task.

// `status` with its message prefixed by "op_type: " (for errors from Attributes); OK stays OK.
absl::Status WithOpType(absl::string_view op_type, const absl::Status& status);

// "float32[2, 3]".
std::string DescribeTensor(const plan::TensorDesc& desc);

// The number of inputs and outputs, and that no declared shape has a negative dimension.
absl::Status CheckArity(absl::string_view op_type, const KernelInit& init, int num_inputs,
                        int num_outputs);

// Every declared shape has non-negative dimensions.
absl::Status CheckNoNegativeDimensions(absl::string_view op_type, const KernelInit& init);

// `tensor_name` is how the message refers to the tensor, for example "input 'a'".
absl::Status CheckDataType(absl::string_view op_type, absl::string_view tensor_name,
                           const plan::TensorDesc& desc, plan::DataType expected);

// The tensor holds indices (ids, labels): int32 or int64.
absl::Status CheckIndexDataType(absl::string_view op_type, absl::string_view tensor_name,
                                const plan::TensorDesc& desc);

// Every input and output is float32.
absl::Status CheckAllFloat32(absl::string_view op_type, const KernelInit& init);

// `actual` has the shape `expected`; the message names both tensors.
absl::Status CheckSameShape(absl::string_view op_type, absl::string_view expected_name,
                            const Shape& expected, absl::string_view actual_name,
                            const Shape& actual);

// Row-major element strides of `shape`: the last axis has stride 1.
std::vector<int64_t> RowMajorStrides(const Shape& shape);

// The multi-index of row-major element `flat_index` of `shape`, as "[1, 0, 2]" (for messages that
// name the position of a bad value).
std::string DescribeIndex(const Shape& shape, int64_t flat_index);

// The tensors a kernel was built for. Compute checks each call against them (counts, data types,
// shapes), which is a few comparisons and no allocation.
class TensorSignature {
 public:
  explicit TensorSignature(const KernelInit& init);

  absl::Status Check(absl::string_view op_type, const KernelContext& context) const;

 private:
  struct Entry {
    plan::DataType data_type;
    Shape shape;
  };

  std::vector<Entry> inputs_;
  std::vector<Entry> outputs_;
};

}  // namespace loom::cpu

#endif  // LOOM_KERNELS_CPU_KERNEL_CHECKS_H_
