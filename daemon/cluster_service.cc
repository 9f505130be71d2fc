#include "daemon/cluster_service.h"

#include <utility>

#include "runtime/device_name.h"

namespace loom::daemon {

void ClusterServiceImpl::set_address(std::string address) {
  std::lock_guard<std::mutex> lock(mutex_);
  address_ = std::move(address);
}

grpc::Status ClusterServiceImpl::ListNodes(grpc::ServerContext* context,
                                           const v1::ListNodesRequest* request,
                                           v1::ListNodesResponse* response) {
  v1::NodeInfo* node = response->add_nodes();
  node->set_name(node_name_);
  node->set_index(0);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    node->set_address(address_);
  }
  node->set_state(manager_->accepting() ? v1::NODE_STATE_READY : v1::NODE_STATE_DRAINING);
  node->set_coordinator(true);
  node->set_running_job_id(manager_->RunningJobId());
  node->set_version(LOOM_VERSION);
  const ClusterCapacity& capacity = manager_->options().capacity;
  for (const plan::Device& device : capacity.devices.devices) {
    v1::DeviceInfo* info = node->add_devices();
    info->set_name(DeviceName(device));
    info->set_type(DeviceTypeName(device.type()));
    info->set_index(device.index());
    info->set_memory_budget_bytes(capacity.memory_budget_per_device_bytes);
  }
  return grpc::Status::OK;
}

}  // namespace loom::daemon
