#ifndef LOOM_CORE_TENSOR_H_
#define LOOM_CORE_TENSOR_H_

// Loom's tensor types: Shape (dimensions, outermost first), TensorView (a non-owning view of a
// dense row-major tensor in some device's memory, what kernels compute on) and HostTensor (a
// tensor that owns host memory, what sinks collect and jobs fetch).

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/inlined_vector.h"
#include "absl/types/span.h"
#include "proto/plan.pb.h"

namespace loom {

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

  int64_t NumElements() const;
  // The elements of the axes before `axis`, and after it: a row-major tensor is ElementsBefore
  // blocks, each of dimension(axis) runs of ElementsAfter contiguous elements.
  int64_t ElementsBefore(int axis) const;
  int64_t ElementsAfter(int axis) const;
  // "[2, 3, 4]".
  std::string ToString() const;

  bool operator==(const Shape& other) const { return dimensions_ == other.dimensions_; }
  bool operator!=(const Shape& other) const { return !(*this == other); }

 private:
  absl::InlinedVector<int64_t, 6> dimensions_;
};

// A non-owning view of a dense, row-major tensor in some device's memory.
struct TensorView {
  void* data = nullptr;
  plan::DataType data_type = plan::DATA_TYPE_UNSPECIFIED;
  Shape shape;

  int64_t NumElements() const { return shape.NumElements(); }
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
