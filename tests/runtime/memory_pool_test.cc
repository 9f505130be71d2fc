// Memory pools (Plan.memory_pools): registers placed in one pool share its bytes, the runtime
// allocates each pool once and frees it after the registers, and bad pools or placements are
// rejected naming the register and the pool.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "actors/sink_actor.h"
#include "core/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/runtime/runtime_test_util.h"

namespace loom::testing {
namespace {

using ::testing::HasSubstr;

constexpr int kPieces = 12;
constexpr int64_t kElements = 40;              // 160 bytes of float32 per slot
constexpr int64_t kSlotBytes = kElements * 4;  // 160
constexpr int64_t kSecondOffset = 192;         // the next multiple of 64
constexpr int64_t kPoolBytes = kSecondOffset + kSlotBytes;

// source -> a -> t1 -> b -> t2 -> c -> t3 -> d -> sink on one stream, one slot per register.
// Priorities rise downstream, so the stream thread finishes a piece before the source starts the
// next: a and c are never live together, nor b and d. With `pooled`, a and c share offset 0 of
// pool 'shared', b and d its offset 192 (what the compiler would write for this chain).
PlanBuilder Chain(bool pooled, int devices = 1) {
  PlanBuilder builder("pooled_chain");
  builder.AddCpuDevices(devices);
  for (const char* name : {"a", "b", "c", "d"}) {
    builder.AddRegister(name, {kElements}, plan::FLOAT32, 1);
  }
  builder.AddTask("source", plan::SOURCE, 0, {}, {"a"}, "test_piece").set_num_pieces(kPieces);
  builder.AddTask("t1", plan::COMPUTE, 0, {"a"}, {"b"}, "test_sum_plus_one").set_priority(1);
  builder.AddTask("t2", plan::COMPUTE, 0, {"b"}, {"c"}, "test_sum_plus_one").set_priority(2);
  builder.AddTask("t3", plan::COMPUTE, 0, {"c"}, {"d"}, "test_sum_plus_one").set_priority(3);
  builder.AddTask("sink", plan::SINK, 0, {"d"}, {}).set_priority(4);
  if (pooled) {
    plan::Plan& plan = builder.mutable_plan();
    plan::MemoryPool* pool = plan.add_memory_pools();
    pool->set_name("shared");
    *pool->mutable_device() = plan.devices(0).device();
    pool->set_bytes(kPoolBytes);
    pool->set_unshared_bytes(4 * kSlotBytes);
    pool->set_num_registers(4);
    for (int r = 0; r < plan.registers_size(); ++r) {
      plan.mutable_registers(r)->set_pool("shared");
      plan.mutable_registers(r)->set_pool_offset(r % 2 == 0 ? 0 : kSecondOffset);
    }
  }
  return builder;
}

plan::RegisterDesc& RegisterNamed(PlanBuilder& builder, const std::string& name) {
  for (plan::RegisterDesc& reg : *builder.mutable_plan().mutable_registers()) {
    if (reg.name() == name) return reg;
  }
  ADD_FAILURE() << "no register " << name;
  return *builder.mutable_plan().mutable_registers(0);
}

// Every element of every piece the sink kept.
std::vector<std::vector<float>> Fetched(const JobRuntime& job) {
  std::vector<std::vector<float>> result;
  auto pieces = FetchedPieces(job, "sink");
  EXPECT_TRUE(pieces.ok()) << pieces.status();
  if (!pieces.ok() || (*pieces)->empty()) return result;
  for (const HostTensor& tensor : (**pieces)[0]) {
    absl::Span<const float> values = tensor.Values<float>();
    result.emplace_back(values.begin(), values.end());
  }
  return result;
}

void ExpectRejected(const plan::Plan& plan, const std::vector<std::string>& texts) {
  auto job = MakeJob(plan);
  ASSERT_FALSE(job.ok()) << "accepted a bad plan; expected: " << texts[0];
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument) << job.status();
  for (const std::string& text : texts) EXPECT_THAT(job.status().message(), HasSubstr(text));
}

TEST(MemoryPoolTest, PooledRegistersGiveTheSameResultsAsSeparateOnes) {
  auto separate = MakeJob(Chain(false).plan());
  ASSERT_TRUE(separate.ok()) << separate.status();
  ASSERT_TRUE((*separate)->Run().ok());
  auto pooled = MakeJob(Chain(true).plan());
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  ASSERT_TRUE((*pooled)->Run().ok());

  std::vector<std::vector<float>> expected;
  for (int p = 0; p < kPieces; ++p) expected.emplace_back(kElements, static_cast<float>(p + 3));
  EXPECT_EQ(Fetched(**separate), expected);
  EXPECT_EQ(Fetched(**pooled), expected);
}

TEST(MemoryPoolTest, RegistersOfAPoolLieAtTheirOffsetsOfOneBuffer) {
  auto job = MakeJob(Chain(true).plan());
  ASSERT_TRUE(job.ok()) << job.status();
  const Register* a = (*job)->FindRegister("a");
  const Register* b = (*job)->FindRegister("b");
  const Register* c = (*job)->FindRegister("c");
  const Register* d = (*job)->FindRegister("d");
  ASSERT_TRUE(a != nullptr && b != nullptr && c != nullptr && d != nullptr);
  EXPECT_TRUE(a->in_pool());
  EXPECT_EQ(a->num_slots(), 1);
  EXPECT_EQ(a->slot_bytes(), kSlotBytes);
  char* base = static_cast<char*>(a->SlotView(0).data);
  EXPECT_EQ(c->SlotView(0).data, base);
  EXPECT_EQ(b->SlotView(0).data, base + kSecondOffset);
  EXPECT_EQ(d->SlotView(0).data, base + kSecondOffset);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(base) % 64, 0u);

  auto separate = MakeJob(Chain(false).plan());
  ASSERT_TRUE(separate.ok()) << separate.status();
  EXPECT_FALSE((*separate)->FindRegister("a")->in_pool());
  EXPECT_NE((*separate)->FindRegister("a")->SlotView(0).data,
            (*separate)->FindRegister("c")->SlotView(0).data);
}

TEST(MemoryPoolTest, ThePoolIsOneAllocationInsteadOfOnePerRegister) {
  auto separate = MakeJob(Chain(false).plan());
  ASSERT_TRUE(separate.ok()) << separate.status();
  auto pooled = MakeJob(Chain(true).plan());
  ASSERT_TRUE(pooled.ok()) << pooled.status();
  const std::shared_ptr<DeviceMemory> separate_memory = (*separate)->device_memories()[0];
  const std::shared_ptr<DeviceMemory> pooled_memory = (*pooled)->device_memories()[0];
  EXPECT_EQ(separate_memory->allocated_bytes(), 4 * kSlotBytes);
  EXPECT_EQ(pooled_memory->allocated_bytes(), kPoolBytes);

  ASSERT_TRUE((*separate)->Run().ok());
  ASSERT_TRUE((*pooled)->Run().ok());
  EXPECT_EQ(pooled_memory->allocated_bytes(), kPoolBytes);
  // The sinks charge the same host copies in both; the registers make the difference.
  EXPECT_EQ(separate_memory->peak_bytes() - pooled_memory->peak_bytes(),
            4 * kSlotBytes - kPoolBytes);

  // The registers give their slots back without freeing the pool's bytes; then the pool goes.
  pooled->reset();
  EXPECT_EQ(pooled_memory->allocated_bytes(), 0);
}

TEST(MemoryPoolTest, APoolOverTheBudgetFailsTheBuildNamingThePool) {
  PlanBuilder builder = Chain(true);
  builder.mutable_plan().mutable_devices(0)->set_memory_budget_bytes(kPoolBytes - 1);
  auto job = MakeJob(builder.plan());
  ASSERT_FALSE(job.ok());
  EXPECT_EQ(job.status().code(), absl::StatusCode::kResourceExhausted) << job.status();
  EXPECT_THAT(job.status().message(), HasSubstr("memory pool 'shared' (4 registers)"));
}

TEST(MemoryPoolValidationTest, PoolWithoutAName) {
  PlanBuilder builder = Chain(true);
  builder.mutable_plan().mutable_memory_pools(0)->set_name("");
  ExpectRejected(builder.plan(), {"memory pool #0 has no name"});
}

TEST(MemoryPoolValidationTest, PoolDeclaredTwice) {
  PlanBuilder builder = Chain(true);
  *builder.mutable_plan().add_memory_pools() = builder.plan().memory_pools(0);
  ExpectRejected(builder.plan(), {"memory pool 'shared' is declared twice"});
}

TEST(MemoryPoolValidationTest, PoolOnADeviceThePlanDoesNotHave) {
  PlanBuilder builder = Chain(true);
  builder.mutable_plan().mutable_memory_pools(0)->mutable_device()->set_index(5);
  ExpectRejected(builder.plan(),
                 {"memory pool 'shared' is on device node0/cpu:5", "not among the plan's devices"});
}

TEST(MemoryPoolValidationTest, PoolOfNoBytes) {
  PlanBuilder builder = Chain(true);
  builder.mutable_plan().mutable_memory_pools(0)->set_bytes(0);
  ExpectRejected(builder.plan(), {"memory pool 'shared' has 0 bytes"});
}

TEST(MemoryPoolValidationTest, PoolBeyondTheTensorLimit) {
  PlanBuilder builder = Chain(true);
  builder.mutable_plan().mutable_memory_pools(0)->set_bytes(kMaxTensorBytes + 1);
  ExpectRejected(builder.plan(), {"memory pool 'shared' has 2251799813685249 bytes"});
}

TEST(MemoryPoolValidationTest, RegisterInAnUndeclaredPool) {
  PlanBuilder builder = Chain(true);
  RegisterNamed(builder, "c").set_pool("elsewhere");
  ExpectRejected(builder.plan(),
                 {"register 'c' in memory pool 'elsewhere': the plan has no such pool"});
}

TEST(MemoryPoolValidationTest, RegisterInAPoolWithTwoSlots) {
  PlanBuilder builder = Chain(true);
  RegisterNamed(builder, "b").set_num_slots(2);
  ExpectRejected(builder.plan(), {"register 'b' in memory pool 'shared' has 2 slots"});
}

TEST(MemoryPoolValidationTest, NegativeOffset) {
  PlanBuilder builder = Chain(true);
  RegisterNamed(builder, "c").set_pool_offset(-64);
  ExpectRejected(builder.plan(), {"register 'c' in memory pool 'shared' is at offset -64"});
}

TEST(MemoryPoolValidationTest, UnalignedOffset) {
  PlanBuilder builder = Chain(true);
  RegisterNamed(builder, "c").set_pool_offset(32);
  ExpectRejected(builder.plan(),
                 {"register 'c' in memory pool 'shared' is at offset 32", "multiple of 64"});
}

TEST(MemoryPoolValidationTest, SlotEndingBeyondThePool) {
  PlanBuilder builder = Chain(true);
  RegisterNamed(builder, "d").set_pool_offset(256);  // 256 + 160 > 352
  ExpectRejected(builder.plan(),
                 {"register 'd' in memory pool 'shared'",
                  "its slot of 160 bytes at offset 256 ends beyond the pool's 352 bytes"});
}

TEST(MemoryPoolValidationTest, OffsetWhoseEndOverflows) {
  PlanBuilder builder = Chain(true);
  // A multiple of 64 that int64 holds, but not with the slot's 160 bytes added.
  const int64_t offset = std::numeric_limits<int64_t>::max() - 63;
  RegisterNamed(builder, "d").set_pool_offset(offset);
  ExpectRejected(builder.plan(), {"register 'd' in memory pool 'shared'",
                                  absl::StrCat("at offset ", offset, " ends beyond the pool")});
}

TEST(MemoryPoolValidationTest, PoolOnAnotherDeviceThanTheProducer) {
  PlanBuilder builder = Chain(true, /*devices=*/2);
  *builder.mutable_plan().mutable_memory_pools(0)->mutable_device() =
      builder.plan().devices(1).device();
  ExpectRejected(builder.plan(),
                 {"register 'a' in memory pool 'shared': the pool is on node0/cpu:1",
                  "lives on node0/cpu:0, the device of its producer 'source'"});
}

TEST(MemoryPoolValidationTest, OffsetWithoutAPool) {
  PlanBuilder builder = Chain(false);
  RegisterNamed(builder, "b").set_pool_offset(64);
  ExpectRejected(builder.plan(), {"register 'b' has pool_offset 64 but names no memory pool"});
}

}  // namespace
}  // namespace loom::testing
