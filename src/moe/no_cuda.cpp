// The expert cache's device factories in a build without CUDA (CMake compiles this file only then;
// a CUDA build has them in moe/cuda/): they refuse, naming what was asked for. The CPU backend
// never asks: its offloaded experts use HostExpertSlots and the in-process exchange.
#include "moe/expert_slots.h"
#include "moe/host_exchange.h"
#include "util/error.h"

namespace ft {

std::unique_ptr<ExpertSlots> make_cuda_expert_slots(Ops&, const ExpertBanks&, int32_t n_slots, int32_t) {
  fail(ErrorCode::kUnsupported, "a GPU expert cache of {} slots requested, but this build of FreeToken has no CUDA "
       "backend", n_slots);
}

std::unique_ptr<ExchangeDevice> make_cuda_exchange_device(Ops&, ExchangeBuffers&, ExchangeDispatcher&) {
  fail(ErrorCode::kUnsupported, "a GPU <-> CPU expert exchange requested, but this build of FreeToken has no CUDA "
       "backend");
}

}  // namespace ft
