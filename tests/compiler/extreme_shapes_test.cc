// Issue 56, finding 2, as a property: for every op type the compiler registers (read from the
// registry, so a new op is covered without editing this file), jobs whose inputs and attributes
// take extreme values (0, 1, -1, 2^31, 2^32 + 1, 2^62, INT64_MAX, products that wrap) are either
// refused with INVALID_ARGUMENT / RESOURCE_EXHAUSTED naming the op (or an input, or the device),
// or compile to a plan whose every tensor's bytes are its element count times its type's size,
// without overflow; the small ones then run on CPU to the end. Never a crash. The cases come from
// a fixed seed (splitmix64, the same on every platform), so a failure reproduces; the job of a
// failing case is printed. The arithmetic here is checked too: the test runs under UBSan.
#include <cmath>
#include <cstdint>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/memory_plan.h"
#include "core/checked_arithmetic.h"
#include "core/data_type.h"
#include "core/tensor.h"
#include "gtest/gtest.h"
#include "runtime/plan_validation.h"
#include "tests/compiler/compiler_test_util.h"
#include "tests/compiler/run_util.h"

namespace loom::compiler::testing {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kInt64Min = std::numeric_limits<int64_t>::min();

// Attribute values: small ones (so that some cases are valid) and the extremes.
constexpr int64_t kIntegers[] = {0,
                                 1,
                                 -1,
                                 2,
                                 3,
                                 -2,
                                 24,
                                 int64_t{1} << 31,
                                 (int64_t{1} << 32) + 1,
                                 int64_t{1} << 47,
                                 int64_t{1} << 62,
                                 kInt64Max,
                                 kInt64Min,
                                 768614336404564651,    // * 24 wraps to 8
                                 7905747460161236407};  // * 7 wraps to 1

// Input extents: mostly small, sometimes huge (valid or not: the limit is 2^48 elements).
constexpr int64_t kLargeExtents[] = {0,
                                     -1,
                                     int64_t{1} << 16,
                                     int64_t{1} << 24,
                                     int64_t{1} << 31,
                                     (int64_t{1} << 32) + 1,
                                     int64_t{1} << 47,
                                     int64_t{1} << 62,
                                     kInt64Max,
                                     768614336404564651};

constexpr double kFloats[] = {0.0,
                              1.0,
                              -1.0,
                              1.25,
                              0.5,
                              1e308,
                              -1e308,
                              std::numeric_limits<double>::infinity(),
                              std::numeric_limits<double>::quiet_NaN()};

constexpr const char* kStrings[] = {"float32", "bfloat16", "int32", "sum", "", "bogus"};

// Attribute names every op may be tried with, besides the ones an op says it knows.
constexpr const char* kCommonAttributes[] = {"shape", "axis", "axes", "transpose_a", "transpose_b"};

constexpr int kCasesPerOpType = 16;

// splitmix64: a tiny generator whose sequence does not depend on the standard library.
class Generator {
 public:
  explicit Generator(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += 0x9E3779B97F4A7C15ull;
    uint64_t z = state_;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [0, count).
  int Below(int count) { return static_cast<int>(Next() % static_cast<uint64_t>(count)); }
  bool OneIn(int count) { return Below(count) == 0; }
  template <typename T, size_t N>
  T Pick(const T (&values)[N]) {
    return values[Below(static_cast<int>(N))];
  }

 private:
  uint64_t state_;
};

// What the compiler's own errors say of an op type: the attributes it knows ("unknown attribute
// 'zz_probe' (known: begin, end)"; empty when it does not say) and the input counts it takes
// (those of 1 to 4 not answered "takes N inputs, not M"). So that a case reaches past the first
// checks often enough, for any op type, without a table here.
struct OpProfile {
  std::vector<std::string> known_attributes;
  std::vector<int> input_counts;
};

OpProfile ProbeOpType(const std::string& op_type) {
  OpProfile profile;
  for (int inputs = 1; inputs <= 4; ++inputs) {
    job::Job job;
    job.set_name("probe");
    job.mutable_placement()->add_devices("cpu:0");
    job::Op* op = job.add_ops();
    op->set_name("op0");
    op->set_type(op_type);
    op->add_outputs("out0");
    (*op->mutable_attributes())["zz_probe"].set_int_value(1);
    for (int i = 0; i < inputs; ++i) {
      job::Input* input = job.add_inputs();
      input->set_name(absl::StrCat("in", i));
      input->add_shape(2);
      input->add_shape(2);
      input->mutable_random_normal()->set_std(1);
      op->add_inputs(input->name());
    }
    absl::StatusOr<CompileResult> result = CompileOn(job, 1);
    const std::string message(result.status().message());
    if (message.find(" inputs, not ") == std::string::npos) profile.input_counts.push_back(inputs);
    const size_t known = message.find("(known: ");
    if (known == std::string::npos || !profile.known_attributes.empty()) continue;
    const size_t begin = known + 8;
    const size_t end = message.find(')', begin);
    if (end == std::string::npos) continue;
    const std::string list = message.substr(begin, end - begin);
    if (list != "none") profile.known_attributes = absl::StrSplit(list, ", ");
  }
  return profile;
}

// A shape: mostly small extents, now and then an extreme one.
std::vector<int64_t> RandomShape(Generator& generator, int extreme_one_in) {
  std::vector<int64_t> shape(generator.OneIn(8) ? 0 : 1 + generator.Below(4));
  for (int64_t& extent : shape) {
    extent =
        generator.OneIn(extreme_one_in) ? generator.Pick(kLargeExtents) : 1 + generator.Below(4);
  }
  return shape;
}

// An integer for an attribute: small two times in three (so that axes, permutations and shapes
// are sometimes valid), else an extreme.
int64_t RandomInteger(Generator& generator) {
  return generator.OneIn(3) ? generator.Pick(kIntegers) : generator.Below(5) - 1;
}

void AddRandomAttribute(const std::string& name, Generator& generator, job::Op* op) {
  plan::AttributeValue& value = (*op->mutable_attributes())[name];
  const int kind = generator.Below(20);
  if (kind < 10) {
    plan::IntList* list = value.mutable_int_list();
    const int length = generator.Below(5);
    for (int i = 0; i < length; ++i) list->add_values(RandomInteger(generator));
  } else if (kind < 16) {
    value.set_int_value(RandomInteger(generator));
  } else if (kind < 18) {
    value.set_float_value(generator.Pick(kFloats));
  } else if (kind < 19) {
    value.set_bool_value(generator.OneIn(2));
  } else {
    value.set_string_value(generator.Pick(kStrings));
  }
}

// One job: inputs of random ranks and extents (often sharing one shape, as many ops need), one op
// of `op_type` reading them with random attributes, every output fetched.
job::Job RandomJob(const std::string& op_type, const OpProfile& profile, Generator& generator) {
  job::Job job;
  job.set_name("extreme");
  job.mutable_placement()->add_devices("cpu:0");
  const bool two_devices = generator.OneIn(3);
  if (two_devices) job.mutable_placement()->add_devices("cpu:1");
  job::Op* op = job.add_ops();
  op->set_name("op0");
  op->set_type(op_type);
  const int num_inputs =
      profile.input_counts.empty() || generator.OneIn(8)
          ? 1 + generator.Below(4)
          : profile.input_counts[generator.Below(static_cast<int>(profile.input_counts.size()))];
  const std::vector<int64_t> shared = RandomShape(generator, 6);
  for (int i = 0; i < num_inputs; ++i) {
    job::Input* input = job.add_inputs();
    input->set_name(absl::StrCat("in", i));
    for (int64_t extent : generator.OneIn(2) ? shared : RandomShape(generator, 8)) {
      input->add_shape(extent);
    }
    if (generator.OneIn(4)) {
      input->set_data_type(generator.OneIn(2) ? plan::INT32 : plan::INT64);
      input->set_random_integers_below(3);
    } else {
      input->mutable_random_normal()->set_std(1);
      input->mutable_random_normal()->set_seed(i);
    }
    // Mostly broadcast: a split of an extent below the devices is refused at the input.
    if (!generator.OneIn(4)) input->add_sbp("B");
    op->add_inputs(input->name());
  }
  const int num_attributes = generator.Below(4);
  for (int i = 0; i < num_attributes; ++i) {
    const std::vector<std::string>& known = profile.known_attributes;
    const bool from_known = !known.empty() && !generator.OneIn(4);
    const std::string name = from_known ? known[generator.Below(static_cast<int>(known.size()))]
                                        : generator.Pick(kCommonAttributes);
    AddRandomAttribute(name, generator, op);
  }
  op->add_outputs("out0");
  job.add_fetch("out0");
  return job;
}

// The outputs an op says it produces ("produces 4 outputs but names 1"), if that is the error.
std::optional<int> ProducedOutputs(const absl::Status& status) {
  const std::string message(status.message());
  const size_t produces = message.find(" produces ");
  const size_t outputs = message.find(" outputs but names ");
  if (produces == std::string::npos || outputs == std::string::npos || outputs < produces) {
    return std::nullopt;
  }
  const size_t begin = produces + 10;
  int count = 0;
  if (!absl::SimpleAtoi(message.substr(begin, outputs - begin), &count) || count < 1 || count > 8) {
    return std::nullopt;
  }
  return count;
}

// Every tensor description: within the limits, its bytes exactly count * size (no overflow).
void ExpectExactBytes(const plan::TensorDesc& desc, const std::string& what,
                      const std::string& job) {
  absl::StatusOr<int64_t> bytes = CheckedTensorBytes(desc.shape(), desc.data_type());
  ASSERT_TRUE(bytes.ok()) << what << ": " << bytes.status() << "\njob: " << job;
  const std::optional<int64_t> elements = Shape(desc.shape()).CheckedNumElements();
  ASSERT_TRUE(elements.has_value()) << what << "\njob: " << job;
  const std::optional<int64_t> expected =
      CheckedMultiply(*elements, DataTypeSize(desc.data_type()));
  ASSERT_TRUE(expected.has_value()) << what << "\njob: " << job;
  EXPECT_EQ(*bytes, *expected) << what << "\njob: " << job;
  EXPECT_LE(*bytes, kMaxTensorBytes) << what << "\njob: " << job;
}

// The memory a compiled job's registers take in all (saturating): what decides whether it runs.
int64_t RegisterMemory(const CompileResult& result) {
  int64_t total = 0;
  for (const plan::Plan& node_plan : result.node_plans) {
    for (const plan::RegisterDesc& reg : node_plan.registers()) {
      absl::StatusOr<int64_t> bytes =
          CheckedTensorBytes(reg.tensor().shape(), reg.tensor().data_type());
      const std::optional<int64_t> all =
          bytes.ok() ? CheckedMultiply(*bytes, reg.num_slots()) : std::nullopt;
      const std::optional<int64_t> sum = all.has_value() ? CheckedAdd(total, *all) : std::nullopt;
      if (!sum.has_value()) return kInt64Max;
      total = *sum;
    }
  }
  return total;
}

// Whether every integer attribute of the job's op is small: a sleep of 2^62 microseconds
// compiles, but is not for a unit test to run.
bool HasOnlySmallIntegers(const job::Job& job) {
  for (const auto& [name, value] : job.ops(0).attributes()) {
    if (value.has_int_value() && (value.int_value() < -4096 || value.int_value() > 4096)) {
      return false;
    }
    for (int64_t element : value.int_list().values()) {
      if (element < -4096 || element > 4096) return false;
    }
  }
  return true;
}

struct Tally {
  int refused = 0;
  int compiled = 0;
  int ran = 0;
};

void CheckCase(const std::string& op_type, const OpProfile& profile, Generator& generator,
               Tally& tally) {
  job::Job job = RandomJob(op_type, profile, generator);
  absl::StatusOr<CompileResult> result = CompileOn(job, 2);
  if (!result.ok()) {
    // The op has another number of outputs: the same job with that many.
    if (std::optional<int> produced = ProducedOutputs(result.status()); produced.has_value()) {
      job.mutable_ops(0)->clear_outputs();
      job.clear_fetch();
      for (int i = 0; i < *produced; ++i) {
        job.mutable_ops(0)->add_outputs(absl::StrCat("out", i));
        job.add_fetch(absl::StrCat("out", i));
      }
      result = CompileOn(job, 2);
    }
  }
  const std::string text = job.ShortDebugString();
  if (!result.ok()) {
    ++tally.refused;
    const absl::Status& status = result.status();
    EXPECT_TRUE(status.code() == absl::StatusCode::kInvalidArgument ||
                status.code() == absl::StatusCode::kResourceExhausted)
        << op_type << ": " << status << "\njob: " << text;
    const std::string message(status.message());
    EXPECT_TRUE(message.find("op 'op0'") != std::string::npos ||
                message.find("input 'in") != std::string::npos ||
                message.find("device node0/cpu:") != std::string::npos)
        << op_type << ": the error names neither the op, an input nor a device: " << status
        << "\njob: " << text;
    return;
  }
  ++tally.compiled;
  for (const LogicalTensor& tensor : result->graph.tensors) {
    plan::TensorDesc desc;
    for (int64_t extent : tensor.type.shape.dimensions()) desc.add_shape(extent);
    desc.set_data_type(tensor.type.data_type);
    ExpectExactBytes(desc, absl::StrCat(op_type, ": tensor '", tensor.name, "'"), text);
  }
  for (const plan::Plan& node_plan : result->node_plans) {
    absl::Status valid = ValidatePlan(node_plan);
    EXPECT_TRUE(valid.ok()) << op_type << ": the runtime refuses the compiler's plan: " << valid
                            << "\njob: " << text;
    for (const plan::RegisterDesc& reg : node_plan.registers()) {
      ExpectExactBytes(reg.tensor(), absl::StrCat(op_type, ": register '", reg.name(), "'"), text);
    }
  }
  for (const DeviceMemoryEstimate& estimate : EstimateMemory(result->node_plans)) {
    EXPECT_LE(estimate.total_bytes(), kMaxDeviceMemoryBytes) << op_type << "\njob: " << text;
  }
  if (RegisterMemory(*result) > (int64_t{1} << 20) || !HasOnlySmallIntegers(job)) return;
  ++tally.ran;
  absl::StatusOr<std::map<std::string, std::vector<HostTensor>>> fetched = CompileAndRun(job, 2);
  EXPECT_TRUE(fetched.ok()) << op_type << ": compiled but did not run: " << fetched.status()
                            << "\njob: " << text;
}

TEST(ExtremeShapesTest, EveryOpTypeRefusesOrCompilesExactSizesAndRuns) {
  const std::vector<std::string> op_types = StandardOps().OpTypes();
  ASSERT_FALSE(op_types.empty());
  Tally tally;
  for (size_t type = 0; type < op_types.size(); ++type) {
    const std::string& op_type = op_types[type];
    const OpProfile profile = ProbeOpType(op_type);
    // A seed per op type: adding an op does not change the cases of the others.
    uint64_t seed = 56;
    for (char c : op_type) seed = seed * 131 + static_cast<unsigned char>(c);
    Generator generator(seed);
    for (int i = 0; i < kCasesPerOpType; ++i) {
      SCOPED_TRACE(absl::StrCat(op_type, " case ", i));
      CheckCase(op_type, profile, generator, tally);
    }
  }
  // The cases reach both sides of the property.
  EXPECT_GT(tally.refused, 0);
  EXPECT_GT(tally.compiled, 0);
  EXPECT_GT(tally.ran, 0);
  std::cout << op_types.size() << " op types: " << tally.refused << " refused, " << tally.compiled
            << " compiled, " << tally.ran << " ran\n";
}

TEST(ExtremeShapesTest, ExtremeHierarchiesAreRefusedOrExact) {
  Generator generator(56);
  for (int i = 0; i < 200; ++i) {
    job::Job job = ParseJob(R"pb(name: "hierarchy"
                                 inputs {
                                   name: "x"
                                   shape: [ 4, 6 ]
                                   random_normal { std: 1 seed: 1 }
                                 }
                                 ops { name: "r" type: "relu" inputs: "x" outputs: "y" }
                                 fetch: "y")pb");
    job::Placement* placement = job.mutable_ops(0)->mutable_placement();
    const int devices = 1 + generator.Below(2);
    for (int device = 0; device < devices; ++device) {
      placement->add_devices(absl::StrCat("cpu:", device));
    }
    const int axes = 1 + generator.Below(3);
    std::optional<int64_t> product = 1;
    bool positive = true;
    for (int axis = 0; axis < axes; ++axis) {
      const int64_t extent =
          generator.OneIn(2) ? generator.Pick(kIntegers) : 1 + generator.Below(2);
      placement->add_hierarchy(extent);
      positive = positive && extent >= 1;
      if (product.has_value()) product = CheckedMultiply(*product, extent);
    }
    const std::string text = job.ShortDebugString();
    absl::StatusOr<CompileResult> result = CompileOn(job, 2);
    if (positive && product == devices) {
      EXPECT_TRUE(result.ok()) << result.status() << "\njob: " << text;
    } else {
      ASSERT_FALSE(result.ok()) << "job: " << text;
      EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
      EXPECT_NE(result.status().message().find("op 'r': the placement's hierarchy"),
                std::string::npos)
          << result.status();
    }
  }
}

}  // namespace
}  // namespace loom::compiler::testing
