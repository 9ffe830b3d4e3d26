// Ops: the defaults of the optional parts of the interface: graphs (none), and the unfused
// add_rms_norm, norm_rope, qk_norm_rope_store, qk_norm_rope_attention and moe_router.
#include "backend/ops.h"

#include "backend/op_checks.h"

#include "util/error.h"

namespace ft {

std::unique_ptr<HostAllocator> Ops::host_allocator() const { return make_host_allocator(); }


void Ops::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x, const Tensor& positions) {
  if (p.head_dim < 1 || x.cols() % p.head_dim != 0)
    fail(ErrorCode::kInvalidArgument, "norm_rope: x {} rows are not whole heads of {}", x.str(), p.head_dim);
  Tensor heads = x.reshape({x.rows() * (x.cols() / p.head_dim), p.head_dim});
  rms_norm(np, heads, w, heads);
  rope(p, x, positions);
}

void Ops::qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p,
                             Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv) {
  norm_rope(np, wq, p, q, batch.positions);
  norm_rope(np, wk, p, k, batch.positions);
  kv_write(batch, k, v, kv);
}

void Ops::qk_norm_rope_attention(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& rp,
                                 const AttentionParams& ap, Tensor q, Tensor k, const Tensor& v,
                                 const BatchInfo& batch, KvLayer kv, Tensor out, ActQ8* out_q8) {
  qk_norm_rope_store(np, wq, wk, rp, q, k, v, batch, kv);
  attention(ap, batch, q, kv, out, out_q8);
}

void Ops::moe_router(const RouterParams& p, const Tensor& x, const Tensor& w, const Tensor& bias, Tensor logits,
                     Tensor ids, Tensor weights, const Tensor& n_valid, ActQ8* x_q8) {
  matmul(x, w, logits, bias, x_q8);  // a valid handle is used and kept; none is written
  moe_route(p, logits, ids, weights);
  if (!n_valid.empty()) moe_mask_rows(n_valid, ids);
}

void Ops::add_rms_norm(const RmsNormParams& p, Tensor x, const Tensor& r, const Tensor& w, Tensor out,
                       ActQ8* out_q8) {
  add(x, r, x);
  rms_norm(p, x, w, out, out_q8);
}

std::unique_ptr<StepGraph> Ops::capture(const std::function<void()>&) {
  fail(ErrorCode::kUnsupported, "{} backend: graph capture is not supported", name());
}

}  // namespace ft
