#ifndef LOOM_TESTING_PLAN_BUILDER_H_
#define LOOM_TESTING_PLAN_BUILDER_H_

// PlanBuilder: writes plans in code (CPU devices, registers, tasks and their kernel attributes),
// for tests and benchmarks that need a plan without the compiler: the runtime, CUDA and client
// tests and the actor-hop, pipeline, transfer, launch-overhead and collective benchmarks.

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "proto/plan.pb.h"

namespace loom {

// Writes plans in code, for tests, benchmarks and tools (the compiler emits plans itself).
//
//   PlanBuilder builder("chain");
//   builder.AddCpuDevices(2);
//   builder.AddRegister("x", {4}, plan::FLOAT32, 2);
//   builder.AddTask("source", plan::SOURCE, 0, {}, {"x"}, "fill").set_num_pieces(10);
class PlanBuilder {
 public:
  explicit PlanBuilder(const std::string& job_name);

  // CPU devices 0..count-1 of node 0; budget 0 means unlimited.
  PlanBuilder& AddCpuDevices(int count, int64_t memory_budget_bytes = 0);
  PlanBuilder& AddRegister(const std::string& name, std::initializer_list<int64_t> shape,
                           plan::DataType data_type = plan::FLOAT32, int num_slots = 2);
  PlanBuilder& AddRegister(const std::string& name, const std::vector<int64_t>& shape,
                           plan::DataType data_type, int num_slots);
  // A task on the compute stream of CPU device `device`; returns it for further settings.
  plan::Task& AddTask(const std::string& name, plan::TaskKind kind, int device,
                      std::vector<std::string> inputs, std::vector<std::string> outputs,
                      const std::string& op_type = "");

  // Attribute setters for the last added task's kernel.
  static void SetAttribute(plan::Task& task, const std::string& name, int64_t value);
  static void SetFloatAttribute(plan::Task& task, const std::string& name, double value);
  static void SetBoolAttribute(plan::Task& task, const std::string& name, bool value);
  static void SetStringAttribute(plan::Task& task, const std::string& name,
                                 const std::string& value);

  const plan::Plan& plan() const { return plan_; }
  plan::Plan& mutable_plan() { return plan_; }

 private:
  plan::Plan plan_;
};

}  // namespace loom

#endif  // LOOM_TESTING_PLAN_BUILDER_H_
