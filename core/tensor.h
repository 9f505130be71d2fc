#ifndef LOOM_CORE_TENSOR_H_
#define LOOM_CORE_TENSOR_H_

// Loom's tensor types: Shape (dimensions, outermost first), TensorView (a non-owning view of a
// dense row-major tensor in some device's memory, what kernels compute on) and HostTensor (a
// tensor that owns host memory, what sinks collect and jobs fetch). Also the limits on a tensor's
// size (kMaxTensorElements, kMaxTensorBytes) and CheckedTensorBytes, the one check of a shape
// against them that the compiler and plan validation apply to every tensor.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom {

// The largest tensor Loom compiles or runs: 2^48 elements (256 Ti; a petabyte of float32, three
// orders of magnitude beyond any device's memory and any cluster's, so no real job meets it) and
// 2^51 bytes (2^48 elements of the widest type, 8 bytes). The headroom is what makes the
// arithmetic on sizes safe: an element count times an element size, or the sum of thousands of
// tensors' bytes, stays far from int64's 2^63. Every extent counts (0 as 1), so every
// sub-product of a valid shape (ElementsBefore, ElementsAfter) is within the limit too.
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 48;
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 51;

// The dimensions of a tensor, outermost first. A rank-0 shape is a scalar with one element.
class Shape {
 public:
  Shape() = default;
  explicit Shape(absl::Span<const int64_t> dimensions)
      : dimensions_(dimensions.begin(), dimensions.end()) {}
  Shape(std::initializer_list<int64_t> dimensions) : dimensions_(dimensions) {}

  static Shape FromProto(const plan::TensorDesc& desc) { return Shape(desc.shape()); }

  int rank() const { return static_cast<int>(dimensions_.size()); }
  int64_t dimension(int axis) const { return dimensions_[axis]; }
  absl::Span<const int64_t> dimensions() const { return dimensions_; }
  void set_dimension(int axis, int64_t value) { dimensions_[axis] = value; }

  // The product of the dimensions, or nullopt when an extent is negative or the product does
  // not fit in int64.
  std::optional<int64_t> CheckedNumElements() const;
  // The product of the dimensions. Every shape the compiler emits and every plan the runtime
  // runs passes CheckedTensorBytes, so this is exact for them; for a shape that did not (a
  // negative extent, a product beyond int64) it is INT64_MAX, never a wrapped small count, so
  // that an allocation sized from it fails instead of being too small.
  int64_t NumElements() const;
  // The elements of the axes before `axis`, and after it: a row-major tensor is ElementsBefore
  // blocks, each of dimension(axis) runs of ElementsAfter contiguous elements. INT64_MAX as for
  // NumElements when not representable.
  int64_t ElementsBefore(int axis) const;
  int64_t ElementsAfter(int axis) const;
  // "[2, 3, 4]".
  std::string ToString() const;

  bool operator==(const Shape& other) const { return dimensions_ == other.dimensions_; }
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  absl::InlinedVector<int64_t, 6> dimensions_;
};

// The bytes of a dense tensor of `data_type` and `shape`, or INVALID_ARGUMENT saying why Loom
// holds no such tensor: no data type, a negative extent, more than kMaxTensorElements elements
// (extents of 0 counted as 1) or more than kMaxTensorBytes bytes. Messages start with the shape
// ("shape [8, -1] has a negative extent"); callers prefix the tensor, op or register.
absl::StatusOr<int64_t> CheckedTensorBytes(absl::Span<const int64_t> shape,
                                           plan::DataType data_type);

// A non-owning view of a dense, row-major tensor in some device's memory.
struct TensorView {
  void* data = nullptr;
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape shape;

  int64_t NumElements() const { return shape.NumElements(); }
  // NumElements() times the data type's size; INT64_MAX when that does not fit.
  int64_t ByteSize() const;

  template <typename T>
  T* Data() const {
    return static_cast<T*>(data);
  }
};

// A tensor that owns host memory: what sinks collect and what jobs fetch.
struct HostTensor {
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape shape;
  std::vector<std::byte> bytes;

  TensorView View() { return TensorView{bytes.data(), data_type, shape}; }
  template <typename T>
  absl::Span<const T> Values() const {
    return absl::MakeConstSpan(reinterpret_cast<const T*>(bytes.data()), bytes.size() / sizeof(T));
  }
};

}  // namespace loom

#endif  // LOOM_CORE_TENSOR_H_
