#ifndef LOOM_TESTS_RUNTIME_TEST_KERNELS_H_
#define LOOM_TESTS_RUNTIME_TEST_KERNELS_H_

#include "kernels/kernel_registry.h"

namespace loom::testing {

// Kernels for runtime tests, float32, registered for `device_type` (their code runs on the host:
// other device types only for devices simulated in host memory):
//  "test_piece": fills its outputs with the piece index.
//  "test_sum_plus_one": output = sum of inputs + 1.
//  "test_fail": copies like test_sum_plus_one, but fails on piece `fail_piece`.
//  "test_spin": busy-waits `microseconds`, then output = sum of inputs (no inputs: piece index).
//  "test_descend": an optimizer with one state: inputs (value, gradient, state), outputs (value,
//    state): state += gradient, value -= 0.5 * gradient + 0.001 * (piece + 1).
void RegisterTestKernels(KernelRegistry* registry, plan::DeviceType device_type = plan::CPU);

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_TEST_KERNELS_H_
