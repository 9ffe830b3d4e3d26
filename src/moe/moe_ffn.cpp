#include "moe/moe_ffn.h"

namespace ft {

void moe_ffn(Ops& ops, ExpertCompute& experts, int64_t layer, const RouterParams& router, const MoeWeights& w,
             const Tensor& x, MoeScratch& s, Tensor out, const Tensor& n_valid, const MoePrefetch& prefetch,
             ActQ8* x_q8, dist::Collective* tp) {
  const int64_t T = x.rows();
  Tensor logits = s.router_logits.slice(0, T), ids = s.ids.slice(0, T), weights = s.weights.slice(0, T);
  RouterParams rp = router;
  rp.bias = w.exp_probs_b;
  ops.moe_router(rp, x, w.gate_inp, w.gate_inp_b, logits, ids, weights, n_valid, x_q8);  // logits [T, n_expert]; ids, weights [T, k]
  for (int i = 0; i < prefetch.targets.n; ++i) {  // a later layer's router on this layer's input: its likely experts
    Tensor pi = s.prefetch_ids[i].slice(0, T), pw = s.prefetch_weights[i].slice(0, T);
    rp.bias = prefetch.biases[i];
    ops.moe_router(rp, x, prefetch.routers[i], prefetch.router_biases[i], logits, pi, pw, n_valid, x_q8);
    experts.prefetch(prefetch.targets.layer[i], pi);
  }
  experts.compute(layer, x, ids, weights, out, x_q8);  // [T, H]
  if (w.shexp_gate.empty()) return;
  Tensor g = s.sh_gate.slice(0, T), u = s.sh_up.slice(0, T), y = s.sh_out.slice(0, T);
  ops.matmul(x, w.shexp_gate, g, Tensor(), x_q8);     // [T, F_sh]
  ops.matmul(x, w.shexp_up, u, Tensor(), x_q8);
  ops.swiglu(g, u, g);
  ops.matmul(g, w.shexp_down, y, Tensor());           // [T, H]
  if (tp && tp->group_size() > 1) tp->all_reduce(y, y);  // the ranks' partial sums of the shared expert
  if (w.shexp_gate_inp.empty()) return ops.add(out, y, out);
  Tensor score = s.sh_score.slice(0, T);              // [T, 1]
  ops.matmul(x, w.shexp_gate_inp, score, Tensor(), x_q8);
  ops.sigmoid(score, score);
  ops.add_scaled_rows(y, score, 1.0f, out);
}

}  // namespace ft
