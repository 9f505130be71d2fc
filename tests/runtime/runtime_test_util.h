#ifndef LOOM_TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_
#define LOOM_TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "actors/actor_factory.h"
#include "actors/sink_actor.h"
#include "kernels/kernel_registry.h"
#include "runtime/job_runtime.h"
#include "testing/plan_builder.h"

namespace loom::testing {

// A kernel registry with the CPU kernels and the test kernels.
const KernelRegistry& TestRegistry();

absl::StatusOr<std::unique_ptr<JobRuntime>> MakeJob(const plan::Plan& plan,
                                                    JobOptions options = {});

// The act events of one task, in start order.
std::vector<ActEvent> EventsOf(const JobRuntime& job, const std::string& task_name);

// The first element of every piece a sink received on input `input`.
std::vector<float> SinkValues(const JobRuntime& job, const std::string& sink_name, int input = 0);

}  // namespace loom::testing

#endif  // LOOM_TESTS_RUNTIME_RUNTIME_TEST_UTIL_H_
