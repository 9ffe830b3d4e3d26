#include "kv/page_store.h"

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "util/error.h"

namespace ft {

uint64_t chain_hash(uint64_t parent_hash, std::span<const int32_t> page_tokens) {
  return XXH3_64bits_withSeed(page_tokens.data(), page_tokens.size() * sizeof(int32_t), parent_hash);
}

uint64_t path_hash(std::span<const int32_t> path, int32_t page_size) {
  if (page_size < 1 || path.empty() || path.size() % static_cast<size_t>(page_size) != 0)
    fail(ErrorCode::kInternal, "path_hash: a path of {} tokens is not whole pages of {}", path.size(), page_size);
  uint64_t h = kRootPathHash;
  for (size_t s = 0; s < path.size(); s += static_cast<size_t>(page_size))
    h = chain_hash(h, path.subspan(s, static_cast<size_t>(page_size)));
  return h;
}

}  // namespace ft
