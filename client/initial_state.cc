#include "client/initial_state.h"

#include <cstring>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/data_type.h"
#include "core/tensor.h"

namespace loom {
namespace {

constexpr char kOptimizerPrefix[] = "optimizer.";

plan::DataType DataTypeOf(const job::Variable& variable) {
  return variable.data_type() == plan::DATA_TYPE_UNSPECIFIED ? plan::FLOAT32 : variable.data_type();
}

std::string Describe(plan::DataType data_type, const Shape& shape) {
  return absl::StrCat(DataTypeName(data_type), shape.ToString());
}

// "" when `name` is in the checkpoint with this type and shape; else what is wrong.
std::string Mismatch(const CheckpointTensors& checkpoint, const std::string& name,
                     plan::DataType data_type, const Shape& shape, const std::string& what) {
  auto found = checkpoint.find(name);
  if (found == checkpoint.end()) return absl::StrCat(what, " '", name, "' is missing");
  const checkpoint::SafetensorsTensorInfo& tensor = found->second;
  if (tensor.data_type == data_type && tensor.shape == shape) return "";
  return absl::StrCat(what, " '", name, "' is ", Describe(tensor.data_type, tensor.shape),
                      " but the job's is ", Describe(data_type, shape));
}

absl::Status Problems(const std::string& path, const std::vector<std::string>& problems,
                      const std::string& advice) {
  return absl::InvalidArgumentError(absl::StrCat(
      "checkpoint '", path, "' does not fit the job: ", absl::StrJoin(problems, "; "), advice));
}

// The value of the scalar integer tensor `name` of `checkpoint` (which has one of that name); read
// only once its header entry says it is one integer.
absl::StatusOr<int64_t> ScalarInteger(const std::string& path, const std::string& name,
                                      checkpoint::SafetensorsReader& checkpoint) {
  const checkpoint::SafetensorsTensorInfo& info = *checkpoint.Find(name);
  const bool integer = info.data_type == plan::INT64 || info.data_type == plan::INT32;
  if (!integer || info.shape.NumElements() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("checkpoint '", path, "': '", name,
                                                   "' must be one integer (I64, shape []), not ",
                                                   Describe(info.data_type, info.shape)));
  }
  absl::StatusOr<HostTensor> tensor = checkpoint.ReadTensor(name);
  if (!tensor.ok()) return tensor.status();
  if (info.data_type == plan::INT64) {
    int64_t value;
    std::memcpy(&value, tensor->bytes.data(), sizeof(value));
    return value;
  }
  int32_t value;
  std::memcpy(&value, tensor->bytes.data(), sizeof(value));
  return value;
}

}  // namespace

std::vector<std::string> OptimizerStateNames(const job::Optimizer& optimizer,
                                             const std::string& variable) {
  switch (optimizer.kind_case()) {
    case job::Optimizer::kAdamw:
      return {absl::StrCat(kOptimizerPrefix, "exp_avg.", variable),
              absl::StrCat(kOptimizerPrefix, "exp_avg_sq.", variable)};
    case job::Optimizer::kSgd:
      if (optimizer.sgd().momentum() != 0) {
        return {absl::StrCat(kOptimizerPrefix, "momentum_buffer.", variable)};
      }
      return {};
    default:
      return {};
  }
}

absl::StatusOr<job::InitialState> InitialStateFromCheckpoint(
    const std::string& path, checkpoint::SafetensorsReader& checkpoint, const job::Job& job) {
  const CheckpointTensors& tensors = checkpoint.tensors();
  std::vector<std::string> problems;
  for (const job::Variable& variable : job.variables()) {
    std::string problem = Mismatch(tensors, variable.name(), DataTypeOf(variable),
                                   Shape(variable.shape()), "variable");
    if (!problem.empty()) problems.push_back(std::move(problem));
  }
  if (!problems.empty()) {
    return Problems(path, problems,
                    " (a checkpoint holds every variable by name at its logical shape)");
  }

  job::InitialState state;
  state.set_path(path);
  const bool has_optimizer = job.optimizer().kind_case() != job::Optimizer::KIND_NOT_SET;
  bool has_optimizer_tensors = false;
  for (const auto& [name, tensor] : tensors) {
    if (absl::StartsWith(name, kOptimizerPrefix)) has_optimizer_tensors = true;
  }
  if (!has_optimizer || !has_optimizer_tensors) return state;

  if (checkpoint.Find(kOptimizerStepTensor) == nullptr) {
    return Problems(path,
                    {absl::StrCat("it holds optimizer state but no '", kOptimizerStepTensor,
                                  "' (the number of optimizer steps taken)")},
                    "");
  }
  absl::StatusOr<int64_t> steps = ScalarInteger(path, kOptimizerStepTensor, checkpoint);
  if (!steps.ok()) return steps.status();
  if (*steps < 0) {
    return Problems(path, {absl::StrCat("'", kOptimizerStepTensor, "' is ", *steps)}, "");
  }
  // The states present must have their variable's shape; which must be present is checked on the
  // plan (CheckOptimizerStates).
  for (const job::Variable& variable : job.variables()) {
    for (const std::string& name : OptimizerStateNames(job.optimizer(), variable.name())) {
      if (!tensors.contains(name)) continue;
      std::string problem =
          Mismatch(tensors, name, plan::FLOAT32, Shape(variable.shape()), "optimizer state");
      if (!problem.empty()) problems.push_back(std::move(problem));
    }
  }
  if (!problems.empty()) return Problems(path, problems, "");
  state.set_optimizer_state(true);
  state.set_first_step(*steps);
  return state;
}

absl::Status CheckOptimizerStates(const std::string& path, const CheckpointTensors& checkpoint,
                                  const job::Job& job, const plan::Plan& plan) {
  std::vector<std::string> missing;
  if (plan.variables_size() > 0) {
    for (const plan::VariableLayout& layout : plan.variables()) {
      for (const std::string& name : layout.state_names()) {
        if (!checkpoint.contains(name)) missing.push_back(name);
      }
    }
  } else {
    for (const job::Variable& variable : job.variables()) {
      if (variable.frozen()) continue;
      for (const std::string& name : OptimizerStateNames(job.optimizer(), variable.name())) {
        if (!checkpoint.contains(name)) missing.push_back(name);
      }
    }
  }
  if (missing.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("checkpoint '", path, "' holds only part of the optimizer state: ",
                   absl::StrJoin(missing, ", "), missing.size() == 1 ? " is" : " are",
                   " missing (save all of it, or none to start with a fresh optimizer)"));
}

absl::StatusOr<CheckpointTensors> StartFromCheckpoint(const std::string& path, job::Job* job) {
  absl::StatusOr<std::unique_ptr<checkpoint::SafetensorsReader>> reader =
      checkpoint::SafetensorsReader::Open(path);
  if (!reader.ok()) return reader.status();
  absl::StatusOr<job::InitialState> state = InitialStateFromCheckpoint(path, **reader, *job);
  if (!state.ok()) return state.status();
  *job->mutable_initial_state() = *std::move(state);
  return (*reader)->tensors();
}

}  // namespace loom
