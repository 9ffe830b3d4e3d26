// The expert cache's device parts in a build without CUDA (CMake compiles this file only then; a
// CUDA build compiles moe/cuda/device_factories.cpp instead): the CPU backend's host twins, the only
// backend such a build has.
#include "moe/expert_slots.h"
#include "moe/host_exchange.h"
#include "util/error.h"

namespace ft {

std::unique_ptr<ExpertSlots> make_expert_slots(Ops& ops, const ExpertBanks& banks, int32_t n_slots,
                                               int32_t max_pairs) {
  if (ops.device() != Device::kCpu)
    fail(ErrorCode::kUnsupported, "expert slots: the {} backend has no expert cache in this build", ops.name());
  return std::make_unique<HostExpertSlots>(banks, n_slots, max_pairs);
}

std::unique_ptr<ExchangeDevice> make_exchange_device(Ops& ops, ExchangeBuffers& buffers,
                                                     ExchangeDispatcher& dispatcher) {
  if (ops.device() != Device::kCpu)
    fail(ErrorCode::kUnsupported, "moe exchange: the {} backend has no device side in this build", ops.name());
  return std::make_unique<HostExchangeDevice>(buffers, dispatcher);
}

void set_cuda_prefetch_dma(bool) {}  // no CUDA expert cache in this build

}  // namespace ft
