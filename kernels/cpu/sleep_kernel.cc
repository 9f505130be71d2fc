#include "kernels/cpu/sleep_kernel.h"

#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/tensor.h"
#include "kernels/attributes.h"
#include "kernels/cpu/kernel_checks.h"

namespace loom::cpu {
namespace {

constexpr char kOpType[] = "sleep";
constexpr int64_t kNanosecondsPerSecond = 1'000'000'000;

class SleepKernel : public Kernel {
 public:
  explicit SleepKernel(int64_t microseconds) : microseconds_(microseconds) {}

  absl::Status Compute(const KernelContext& context) override {
    timespec deadline;
    clock_gettime(CLOCK_MONOTONIC, &deadline);
    if (!context.inputs.empty() && !context.outputs.empty()) {
      const TensorView& input = context.inputs[0];
      const TensorView& output = context.outputs[0];
      const int64_t bytes = input.ByteSize();
      if (bytes > 0 && bytes == output.ByteSize() && input.data != output.data &&
          input.data != nullptr && output.data != nullptr) {
        std::memcpy(output.data, input.data, bytes);
      }
    }
    if (microseconds_ == 0) return absl::OkStatus();
    const int64_t nanoseconds = deadline.tv_nsec + (microseconds_ % 1'000'000) * 1'000;
    deadline.tv_sec += microseconds_ / 1'000'000 + nanoseconds / kNanosecondsPerSecond;
    deadline.tv_nsec = nanoseconds % kNanosecondsPerSecond;
    int result;
    do {
      result = clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &deadline, nullptr);
    } while (result == EINTR);
    if (result != 0) {
      return absl::InternalError(
          absl::StrCat(kOpType, ": clock_nanosleep failed: ", std::strerror(result)));
    }
    return absl::OkStatus();
  }

 private:
  int64_t microseconds_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Kernel>> CreateSleepKernel(const KernelInit& init) {
  absl::StatusOr<int64_t> microseconds = Attributes(*init.conf).GetInt("microseconds");
  if (!microseconds.ok()) return WithOpType(kOpType, microseconds.status());
  if (*microseconds < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(kOpType, ": attribute 'microseconds' must be >= 0, got ", *microseconds));
  }
  return std::make_unique<SleepKernel>(*microseconds);
}

}  // namespace loom::cpu
