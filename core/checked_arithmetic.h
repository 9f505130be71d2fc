#ifndef LOOM_CORE_CHECKED_ARITHMETIC_H_
#define LOOM_CORE_CHECKED_ARITHMETIC_H_

// CheckedMultiply and CheckedAdd: int64 arithmetic that says when the exact result does not fit
// (std::nullopt) instead of wrapping (undefined behaviour for signed integers). Every size that
// comes from a job, a plan or a peer (element counts, bytes, hierarchy products, memory sums) is
// computed with these. The limits on a tensor's size are in core/tensor.h.

#include <cstdint>
#include <optional>

namespace loom {

// a * b, or nullopt when the product does not fit in int64.
inline std::optional<int64_t> CheckedMultiply(int64_t a, int64_t b) {
  int64_t product;
  if (__builtin_mul_overflow(a, b, &product)) return std::nullopt;
  return product;
}

// a + b, or nullopt when the sum does not fit in int64.
inline std::optional<int64_t> CheckedAdd(int64_t a, int64_t b) {
  int64_t sum;
  if (__builtin_add_overflow(a, b, &sum)) return std::nullopt;
  return sum;
}

}  // namespace loom

#endif  // LOOM_CORE_CHECKED_ARITHMETIC_H_
