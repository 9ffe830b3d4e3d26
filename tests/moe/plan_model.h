#pragma once
// The small model the MoE planner tests plan for (moe_plan_test.cpp, bank_split_test.cpp): layers 0 and
// 5 dense, 1-4 and 6-7 MoE with 16 experts of 1 MiB, 100 MiB resident, 1 MiB of reserved KV.
#include <cstdint>
#include <vector>

#include "moe/moe_plan.h"

namespace ft::testing::plan_model {

constexpr int64_t GiB = int64_t{1} << 30, MiB = int64_t{1} << 20;

inline const std::vector<int32_t> kLayers = {0, 16, 16, 16, 16, 0, 16, 16};

/** That model's budget under a GPU memory limit of `limit` bytes. */
inline GpuMemoryBudget budget(int64_t limit) {
  GpuMemoryBudget b;
  b.gpu_memory_limit = limit;
  b.resident_bytes = 100 * MiB;
  b.kv_bytes_per_token = 1024;
  b.kv_reserve_tokens = 1024;  // 1 MiB
  b.slot_bytes = MiB;
  b.expert_bytes = 96 * MiB;
  return b;
}

}  // namespace ft::testing::plan_model
