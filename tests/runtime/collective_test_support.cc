#include "tests/runtime/collective_test_support.h"

#include <cmath>
#include <random>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/collective_shapes.h"
#include "core/data_type.h"
#include "glog/logging.h"
#include "runtime/collectives/shared_memory_collectives.h"

namespace loom::testing {

plan::Communicator MakeTestCommunicator(const std::vector<int>& node_of_rank, int num_collectives,
                                        int index) {
  plan::Communicator communicator;
  communicator.set_name("comm");
  for (size_t rank = 0; rank < node_of_rank.size(); ++rank) {
    plan::Device* device = communicator.add_devices();
    device->set_node(node_of_rank[rank]);
    device->set_type(plan::CPU);
    device->set_index(static_cast<int>(rank));
  }
  communicator.set_num_collectives(num_collectives);
  communicator.set_index(index);
  return communicator;
}

plan::CollectiveConf MakeCollectiveConf(plan::CollectiveKind kind, int64_t sequence,
                                        const std::string& name, plan::ReduceOperation reduce,
                                        int axis, int concat_axis) {
  plan::CollectiveConf conf;
  conf.set_communicator("comm");
  conf.set_kind(kind);
  conf.set_sequence(sequence);
  conf.set_name(name);
  conf.set_reduce(reduce);
  conf.set_axis(axis);
  conf.set_concat_axis(concat_axis);
  return conf;
}

std::string CollectiveCase::Describe() const {
  std::vector<std::string> shapes;
  for (const Shape& shape : inputs) shapes.push_back(shape.ToString());
  return absl::StrCat(CollectiveKindName(conf.kind()),
                      conf.reduce() == plan::REDUCE_MAX ? " max" : "", " axis ", conf.axis(),
                      " concat_axis ", conf.concat_axis(), " ", DataTypeName(data_type), " inputs ",
                      absl::StrJoin(shapes, " "));
}

RankBuffers MakeRankBuffers(const CollectiveCase& test_case, uint32_t seed) {
  std::mt19937 random(seed);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::uniform_int_distribution<int> byte(0, 255);
  RankBuffers buffers;
  const int size = static_cast<int>(test_case.inputs.size());
  const int64_t element_size = DataTypeSize(test_case.data_type);
  for (int rank = 0; rank < size; ++rank) {
    HostTensor input{test_case.data_type, test_case.inputs[rank], {}};
    input.bytes.resize(static_cast<size_t>(input.shape.NumElements() * element_size));
    if (test_case.data_type == plan::FLOAT32) {
      auto* values = reinterpret_cast<float*>(input.bytes.data());
      for (int64_t i = 0; i < input.shape.NumElements(); ++i) {
        values[i] = std::ldexp(mantissa(random), exponent(random));
      }
    } else {
      for (std::byte& value : input.bytes) value = static_cast<std::byte>(byte(random));
    }
    absl::StatusOr<Shape> output_shape =
        CollectiveOutputShape(test_case.conf, test_case.inputs, rank);
    CHECK(output_shape.ok()) << output_shape.status();
    HostTensor output{test_case.data_type, *output_shape, {}};
    output.bytes.assign(static_cast<size_t>(output_shape->NumElements() * element_size),
                        std::byte{0xA5});
    buffers.inputs.push_back(std::move(input));
    buffers.outputs.push_back(std::move(output));
  }
  return buffers;
}

std::vector<absl::Status> RunRanks(const std::vector<CollectiveBackend*>& backends,
                                   const plan::CollectiveConf& conf, RankBuffers& buffers,
                                   int64_t piece) {
  const int size = static_cast<int>(backends.size());
  std::vector<absl::Status> statuses(size);
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      statuses[rank] = backends[rank]->Run(CollectiveCall{
          rank, &conf, piece, buffers.inputs[rank].View(), buffers.outputs[rank].View()});
    });
  }
  for (std::thread& thread : threads) thread.join();
  return statuses;
}

std::vector<HostTensor> ReferenceOutputs(const CollectiveCase& test_case,
                                         const RankBuffers& buffers) {
  const int size = static_cast<int>(test_case.inputs.size());
  SharedMemoryCollectives reference(MakeTestCommunicator(std::vector<int>(size, 0), 0),
                                    SharedMemoryCollectives::Options{});
  RankBuffers copy = buffers;
  std::vector<CollectiveBackend*> backends(size, &reference);
  for (const absl::Status& status : RunRanks(backends, test_case.conf, copy)) {
    CHECK(status.ok()) << status;
  }
  return copy.outputs;
}

}  // namespace loom::testing
