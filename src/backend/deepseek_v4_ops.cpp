// Ops: the defaults of DeepSeek-V4's ops for a backend without them: a kUnsupported error naming the
// op and the backend (the CPU backend implements each, backend/cpu/); and entry_batch, the batch that
// addresses the compressed-entry pages for the CPU and CUDA ops.
#include "backend/ops.h"
#include "util/error.h"

namespace ft {
namespace {

[[noreturn]] void unsupported(const Ops& ops, const char* op) {
  fail(ErrorCode::kUnsupported, "{}: the {} backend has no kernel for this DeepSeek-V4 op yet (the CPU backend has)",
       op, ops.name());
}

}  // namespace

void Ops::hc_pre(const HyperConnParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor, Tensor,
                 Tensor) {
  unsupported(*this, "hc_pre");
}
void Ops::hc_post(const HyperConnParams&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, Tensor) {
  unsupported(*this, "hc_post");
}
BatchInfo entry_batch(const char* op, const BatchInfo& b, const Tensor& entry_tables) {
  if (entry_tables.empty()) return b;
  if (entry_tables.dtype != DType::I32 || entry_tables.ndim != 2 || entry_tables.dim(0) < b.n_seqs ||
      entry_tables.dim(1) < 1)
    fail(ErrorCode::kInvalidArgument, "{}: entry_tables {} must be I32 [>= {}, max_blocks]", op, entry_tables.str(),
         b.n_seqs);
  BatchInfo e = b;
  e.block_tables = entry_tables;
  e.max_blocks = static_cast<int32_t>(entry_tables.dim(1));
  return e;
}

void Ops::compress_kv(const CompressParams&, const BatchInfo&, const Tensor&, KvLayer, const Tensor&, const Tensor&,
                      Tensor) {
  unsupported(*this, "compress_kv");
}
void Ops::indexer_topk(const IndexerParams&, const BatchInfo&, const Tensor&, const Tensor&, const Tensor&, Tensor) {
  unsupported(*this, "indexer_topk");
}
void Ops::attention_compressed(const CompressedAttentionParams&, const BatchInfo&, const Tensor&, KvLayer,
                               const Tensor&, const Tensor&, Tensor) {
  unsupported(*this, "attention_compressed");
}
void Ops::moe_route_sqrtsoftplus(const RouterParams&, const Tensor&, const Tensor&, const Tensor&, Tensor, Tensor) {
  unsupported(*this, "moe_route_sqrtsoftplus");
}
void Ops::swiglu_clamp(const Tensor&, const Tensor&, float, Tensor) { unsupported(*this, "swiglu_clamp"); }

}  // namespace ft
