#include "tests/runtime/test_kernels.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "kernels/attributes.h"

namespace loom::testing {
namespace {

void SumInputs(const KernelContext& context, float extra) {
  const TensorView& out = context.outputs[0];
  float* values = out.Data<float>();
  for (int64_t i = 0; i < out.NumElements(); ++i) {
    float sum = extra;
    for (const TensorView& in : context.inputs) sum += in.Data<float>()[i];
    if (context.inputs.empty()) sum += static_cast<float>(context.piece);
    values[i] = sum;
  }
}

class PieceKernel final : public Kernel {
 public:
  absl::Status Compute(const KernelContext& context) override {
    for (const TensorView& out : context.outputs) {
      for (int64_t i = 0; i < out.NumElements(); ++i) {
        out.Data<float>()[i] = static_cast<float>(context.piece);
      }
    }
    return absl::OkStatus();
  }
};

class SumPlusOneKernel final : public Kernel {
 public:
  absl::Status Compute(const KernelContext& context) override {
    SumInputs(context, 1.0f);
    return absl::OkStatus();
  }
};

class FailKernel final : public Kernel {
 public:
  explicit FailKernel(int64_t fail_piece) : fail_piece_(fail_piece) {}
  absl::Status Compute(const KernelContext& context) override {
    if (context.piece == fail_piece_) {
      return absl::InternalError(absl::StrCat("injected failure at piece ", context.piece));
    }
    SumInputs(context, 1.0f);
    return absl::OkStatus();
  }

 private:
  int64_t fail_piece_;
};

class SpinKernel final : public Kernel {
 public:
  explicit SpinKernel(int64_t microseconds) : microseconds_(microseconds) {}
  absl::Status Compute(const KernelContext& context) override {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::microseconds(microseconds_);
    while (std::chrono::steady_clock::now() < deadline) {
    }
    SumInputs(context, 0.0f);
    return absl::OkStatus();
  }

 private:
  int64_t microseconds_;
};

class DescendKernel final : public Kernel {
 public:
  absl::Status Compute(const KernelContext& context) override {
    const float* gradient = context.inputs[1].Data<float>();
    float* value = context.outputs[0].Data<float>();
    float* state = context.outputs[1].Data<float>();
    for (int64_t i = 0; i < context.outputs[0].NumElements(); ++i) {
      state[i] += gradient[i];
      value[i] -= 0.5f * gradient[i] + 0.001f * static_cast<float>(context.piece + 1);
    }
    return absl::OkStatus();
  }
};

}  // namespace

void RegisterTestKernels(KernelRegistry* registry, plan::DeviceType device_type) {
  (void)registry->Register(
      "test_descend", device_type,
      [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (init.inputs.size() != 3 || init.outputs.size() != 2) {
          return absl::InvalidArgumentError("test_descend takes (value, gradient, state)");
        }
        return std::make_unique<DescendKernel>();
      });
  (void)registry->Register("test_piece", device_type, [](const KernelInit&) {
    return absl::StatusOr<std::unique_ptr<Kernel>>(std::make_unique<PieceKernel>());
  });
  (void)registry->Register("test_sum_plus_one", device_type, [](const KernelInit&) {
    return absl::StatusOr<std::unique_ptr<Kernel>>(std::make_unique<SumPlusOneKernel>());
  });
  (void)registry->Register("test_fail", device_type,
                           [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                             absl::StatusOr<int64_t> piece =
                                 Attributes(*init.conf).GetInt("fail_piece");
                             if (!piece.ok()) return piece.status();
                             return std::make_unique<FailKernel>(*piece);
                           });
  (void)registry->Register("test_spin", device_type,
                           [](const KernelInit& init) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                             absl::StatusOr<int64_t> microseconds =
                                 Attributes(*init.conf).GetInt("microseconds", 0);
                             if (!microseconds.ok()) return microseconds.status();
                             return std::make_unique<SpinKernel>(*microseconds);
                           });
}

}  // namespace loom::testing
