#pragma once
// The CUDA expert cache's constructors, for moe/cuda/device_factories.cpp (moe/ outside cuda/ calls
// make_expert_slots / make_exchange_device, which pick by the backend's device).
#include <cstdint>
#include <memory>

#include "moe/expert_slots.h"
#include "moe/host_exchange.h"

namespace ft {

/** The CUDA expert slots on `ops` (must be CudaOps; `banks` pinned for its device). Throws
 *  kInvalidArgument for another backend. Defined in moe_cache_slots.cu. */
std::unique_ptr<ExpertSlots> make_cuda_expert_slots(Ops& ops, const ExpertBanks& banks, int32_t n_slots,
                                                    int32_t max_pairs);

/** The CUDA device side of the exchange on `ops` (a CudaOps) and its stream. Throws
 *  kInvalidArgument for another backend. Defined in moe_exchange.cu. */
std::unique_ptr<ExchangeDevice> make_cuda_exchange_device(Ops& ops, ExchangeBuffers& buffers,
                                                          ExchangeDispatcher& dispatcher);

}  // namespace ft
