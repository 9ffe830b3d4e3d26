// moe_route_sqrtsoftplus: DeepSeek-V4's router, sqrt(softplus) scores with a learned top-k (plus
// selection bias) or a token-id hash table choosing the experts (CPU backend; semantics in ops.h,
// after transformers' DeepseekV4TopKRouter and DeepseekV4HashRouter).
#include <cmath>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "util/error.h"

namespace ft {

void CpuOps::moe_route_sqrtsoftplus(const RouterParams& p, const Tensor& logits, const Tensor& tokens,
                                    const Tensor& tid2eid, Tensor ids, Tensor weights) {
  const char* op = "moe_route_sqrtsoftplus";
  cpu::check_dtype(op, "logits", logits, DType::F32);
  cpu::check_dtype(op, "ids", ids, DType::I32);
  cpu::check_dtype(op, "weights", weights, DType::F32);
  const int64_t T = logits.rows(), E = logits.cols(), k = p.n_expert_used;
  const bool hash = !tid2eid.empty();
  if (k < 1 || k > E || !ids.has_shape({T, k}) || !weights.has_shape({T, k}))
    fail(ErrorCode::kInvalidArgument, "{}: logits {}, ids {}, weights {} do not fit k = {}", op, logits.str(),
         ids.str(), weights.str(), k);
  if (!p.bias.empty()) {
    cpu::check_dtype(op, "bias", p.bias, DType::F32);
    if (p.bias.numel() != E) fail(ErrorCode::kInvalidArgument, "{}: bias {} must be [{}]", op, p.bias.str(), E);
  }
  if (hash) {
    cpu::check_dtype(op, "tid2eid", tid2eid, DType::I32);
    cpu::check_dtype(op, "tokens", tokens, DType::I32);
    if (tid2eid.ndim != 2 || tid2eid.dim(1) != k || tokens.numel() != T)
      fail(ErrorCode::kInvalidArgument, "{}: tid2eid {} must be [V, {}] and tokens {} [{}]", op, tid2eid.str(), k,
           tokens.str(), T);
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.ptr<float>() + t * E;
    std::vector<float> s(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) {
      const float x = l[e];
      const float sp = x > 20.0f ? x : std::log1p(std::exp(x));  // torch softplus (threshold 20)
      s[static_cast<size_t>(e)] = std::sqrt(sp);
      sel[static_cast<size_t>(e)] = s[static_cast<size_t>(e)] + (p.bias.empty() ? 0.0f : p.bias.ptr<float>()[e]);
    }
    int32_t* id = ids.ptr<int32_t>() + t * k;
    if (hash) {
      const int32_t tok = tokens.ptr<int32_t>()[t];
      if (tok < 0 || tok >= tid2eid.dim(0))
        fail(ErrorCode::kInvalidArgument, "{}: token {} outside tid2eid's {} rows", op, tok, tid2eid.dim(0));
      for (int64_t j = 0; j < k; ++j) {
        id[j] = tid2eid.ptr<int32_t>()[tok * k + j];
        if (id[j] < 0 || id[j] >= E)
          fail(ErrorCode::kInvalidArgument, "{}: tid2eid[{}] names expert {} (E = {})", op, tok, id[j], E);
      }
    } else {
      cpu::topk_row(sel.data(), E, static_cast<int32_t>(k), id);
    }
    float* wt = weights.ptr<float>() + t * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) sum += (wt[j] = s[static_cast<size_t>(id[j])]);
    for (int64_t j = 0; j < k; ++j) wt[j] = (p.norm_topk_prob ? wt[j] / (sum + 1e-20f) : wt[j]) * p.scaling;
  }
}

}  // namespace ft
