#ifndef LOOM_CORE_BALANCED_SPLIT_H_
#define LOOM_CORE_BALANCED_SPLIT_H_

// The balanced split of an axis among parts (SBP S(i)): AxisRange, the [begin, end) that one part
// holds, and BalancedRange, which gives the first `length % parts` parts one element more. The
// compiler's register shapes and the runtime's collectives both split axes by it.

#include <cstdint>

namespace loom {

// The part of an axis of `length` elements that part `index` of `parts` holds under a balanced
// split (SBP S(i)): the first `length % parts` parts hold one element more. The compiler (register
// shapes) and the runtime (collectives) both use this rule.
struct AxisRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

inline AxisRange BalancedRange(int64_t length, int64_t parts, int64_t index) {
  const int64_t base = length / parts;
  const int64_t remainder = length % parts;
  const int64_t begin = index * base + (index < remainder ? index : remainder);
  return AxisRange{begin, begin + base + (index < remainder ? 1 : 0)};
}

}  // namespace loom

#endif  // LOOM_CORE_BALANCED_SPLIT_H_
