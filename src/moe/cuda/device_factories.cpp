// The expert cache's device parts in a CUDA build (the build without CUDA compiles
// moe/device_factories.cpp instead): the host twins on the CPU backend, the CUDA slots
// (moe_cache_slots.cu) and exchange (moe_exchange.cu) on CudaOps.
#include "moe/cuda/cuda_factories.h"
#include "moe/expert_slots.h"
#include "moe/host_exchange.h"

namespace ft {

std::unique_ptr<ExpertSlots> make_expert_slots(Ops& ops, const ExpertBanks& banks, int32_t n_slots,
                                               int32_t max_pairs) {
  if (ops.device() == Device::kCpu) return std::make_unique<HostExpertSlots>(banks, n_slots, max_pairs);
  return make_cuda_expert_slots(ops, banks, n_slots, max_pairs);
}

std::unique_ptr<ExchangeDevice> make_exchange_device(Ops& ops, ExchangeBuffers& buffers,
                                                     ExchangeDispatcher& dispatcher) {
  if (ops.device() == Device::kCpu) return std::make_unique<HostExchangeDevice>(buffers, dispatcher);
  return make_cuda_exchange_device(ops, buffers, dispatcher);
}

}  // namespace ft
