#include "model/gated_delta_net.h"

#include <cmath>

#include <fmt/format.h>

#include "dist/tensor_parallel.h"
#include "kv/kv_cache.h"

namespace ft {

GatedDeltaParams gated_delta_params(const ModelConfig& c) {
  GatedDeltaParams p;
  p.n_k_heads = static_cast<int32_t>(c.lin_n_k_heads);
  p.n_v_heads = static_cast<int32_t>(c.lin_n_v_heads);
  p.k_head_dim = static_cast<int32_t>(c.lin_k_dim);
  p.v_head_dim = static_cast<int32_t>(c.lin_v_dim);
  p.v_tiled = c.lin_v_tiled;
  return p;
}

GatedDeltaNetWeights load_gated_delta_net(WeightLoader& ld, Ops& ops, const ModelConfig& c, int64_t l,
                                          std::vector<Buffer>& storage, const dist::TpShard& tp) {
  const int64_t H = c.n_embd, Hk = c.lin_n_k_heads, Hv = c.lin_n_v_heads, dk = c.lin_k_dim, dv = c.lin_v_dim;
  const int64_t C = c.lin_conv_dim(), K = c.lin_conv_kernel, r = Hv / Hk;
  const bool split = tp.size > 1;
  if (split && c.lin_v_tiled)
    fail(ErrorCode::kUnsupported, "tensor parallelism of layer {}: linear-attention value heads tiled over the key heads "
         "(llama.cpp's qwen35 order) are not split yet", l);
  // The rank's key heads [g0, g0 + ng) and the value heads that read them [g0 r, (g0 + ng) r).
  const dist::TpRange kh = dist::tp_split(Hk, tp, "linear-attention key heads");
  const int64_t g0 = kh.begin, ng = kh.count, v0 = g0 * r, nv = ng * r;
  auto append = [](std::vector<int64_t>& out, int64_t begin, int64_t n) {
    for (int64_t i = 0; i < n; ++i) out.push_back(begin + i);
  };
  // The rank's rows of the q | k | v layout [2 Hk dk + Hv dv] (in_qkv rows, conv channels).
  std::vector<int64_t> qkv_sel, z_sel, v_sel;
  append(qkv_sel, g0 * dk, ng * dk);
  append(qkv_sel, Hk * dk + g0 * dk, ng * dk);
  append(qkv_sel, 2 * Hk * dk + v0 * dv, nv * dv);
  append(z_sel, v0 * dv, nv * dv);
  append(v_sel, v0, nv);
  auto rows = [&](const WeightName& n, int64_t R, const std::vector<int64_t>& sel) {
    return split ? ld.get_rows(n, {R, H}, sel) : ld.get(n, {R, H});
  };
  auto name = [&](const char* gguf, const char* hf) { return layer_weight(l, gguf, hf); };
  GatedDeltaNetWeights w;
  const WeightName qkvz = name("", "linear_attn.in_proj_qkvz");
  // in_proj_ba / ssm_ba: per key head g, b (r rows) then a (r rows).
  std::vector<int64_t> b_rows, a_rows;
  for (int64_t g = g0; g < g0 + ng; ++g)
    for (int64_t i = 0; i < r; ++i) b_rows.push_back(g * 2 * r + i), a_rows.push_back(g * 2 * r + r + i);
  if (ld.is_gguf()) {  // llama.cpp's qwen3next (b and a fused in ssm_ba) or qwen35 (ssm_beta, ssm_alpha)
    w.in_qkv = rows(name("attn_qkv", ""), C, qkv_sel);
    w.in_z = rows(name("attn_gate", ""), Hv * dv, z_sel);
    if (ld.has(name("ssm_ba", ""))) {
      w.in_b = ld.get_rows(name("ssm_ba", ""), {2 * Hv, H}, b_rows);
      w.in_a = ld.get_rows(name("ssm_ba", ""), {2 * Hv, H}, a_rows);
    } else {
      w.in_b = rows(name("ssm_beta", ""), Hv, v_sel);
      w.in_a = rows(name("ssm_alpha", ""), Hv, v_sel);
    }
  } else if (ld.has(qkvz)) {  // Qwen3-Next: per key head g, rows q (dk), k (dk), v (r dv), z (r dv)
    const int64_t group = 2 * dk + 2 * r * dv;
    std::vector<int64_t> qkv_rows, z_rows;
    for (int part = 0; part < 3; ++part)  // q of every group, then k, then v
      for (int64_t g = g0; g < g0 + ng; ++g) {
        const int64_t off = part == 0 ? 0 : part == 1 ? dk : 2 * dk, n = part == 2 ? r * dv : dk;
        for (int64_t i = 0; i < n; ++i) qkv_rows.push_back(g * group + off + i);
      }
    for (int64_t g = g0; g < g0 + ng; ++g)
      for (int64_t i = 0; i < r * dv; ++i) z_rows.push_back(g * group + 2 * dk + r * dv + i);
    w.in_qkv = ld.get_rows(qkvz, {Hk * group, H}, qkv_rows);
    w.in_z = ld.get_rows(qkvz, {Hk * group, H}, z_rows);
    const WeightName ba = name("", "linear_attn.in_proj_ba");
    w.in_b = ld.get_rows(ba, {2 * Hv, H}, b_rows);
    w.in_a = ld.get_rows(ba, {2 * Hv, H}, a_rows);
  } else {  // Qwen3.5: separate projections, q, k, v already side by side
    w.in_qkv = rows(name("", "linear_attn.in_proj_qkv"), C, qkv_sel);
    w.in_z = rows(name("", "linear_attn.in_proj_z"), Hv * dv, z_sel);
    w.in_b = rows(name("", "linear_attn.in_proj_b"), Hv, v_sel);
    w.in_a = rows(name("", "linear_attn.in_proj_a"), Hv, v_sel);
  }
  if (ld.is_gguf()) {
    const WeightName conv{fmt::format("blk.{}.ssm_conv1d.weight", l), ""};
    w.conv = split ? ld.host_f32(conv, {C, K}, WeightKind::kMatrix) : ld.get_f32(conv, {C, K}, WeightKind::kMatrix);
    const Tensor a = ld.host_f32({fmt::format("blk.{}.ssm_a", l), ""}, {Hv});
    std::vector<float> a_log(static_cast<size_t>(nv));
    for (int64_t h = v0; h < v0 + nv; ++h) {
      const float v = a.ptr<float>()[h];
      if (!(v < 0.0f))
        fail(ErrorCode::kInvalidFile, "tensor blk.{}.ssm_a: entry {} is {}; llama.cpp stores -exp(A_log) (< 0)", l, h, v);
      a_log[static_cast<size_t>(h - v0)] = std::log(-v);
    }
    w.a_log = upload_f32(ops, a_log, storage);
  } else {
    const WeightName conv{"", fmt::format("model.layers.{}.linear_attn.conv1d.weight", l)};
    w.conv = (split ? ld.host_f32(conv, {C, 1, K}) : ld.get_f32(conv, {C, 1, K})).reshape({C, K});
    w.a_log = ld.get_f32({"", fmt::format("model.layers.{}.linear_attn.A_log", l)}, {Hv}).slice(v0, nv);
  }
  if (split) {  // the rank's channels' taps (host copy above), gathered into a resident F32 copy
    std::vector<float> taps(qkv_sel.size() * static_cast<size_t>(K));
    const float* all = w.conv.ptr<float>();
    for (size_t i = 0; i < qkv_sel.size(); ++i)
      for (int64_t j = 0; j < K; ++j) taps[i * static_cast<size_t>(K) + static_cast<size_t>(j)] = all[qkv_sel[i] * K + j];
    w.conv = upload_f32(ops, taps, storage).reshape({static_cast<int64_t>(qkv_sel.size()), K});
  }
  w.dt_bias = ld.get_f32({fmt::format("blk.{}.ssm_dt.bias", l), fmt::format("model.layers.{}.linear_attn.dt_bias", l)}, {Hv})
                  .slice(v0, nv);
  w.norm = ld.get(name("ssm_norm", "linear_attn.norm"), {dv}, WeightKind::kVector);  // per head: every head's
  const WeightName out = name("ssm_out", "linear_attn.out_proj");
  w.out = split ? ld.get_cols(out, {H, Hv * dv}, v0 * dv, nv * dv) : ld.get(out, {H, Hv * dv});
  return w;
}

void gated_delta_net_block(ForwardContext& ctx, int64_t l, GatedDeltaParams p, const RmsNormParams& norm,
                           const GatedDeltaNetWeights& w, const Tensor& h, Tensor out, const ActQ8* h_q8) {
  Ops& ops = ctx.ops;
  ForwardState& s = ctx.state;
  const int64_t T = h.rows(), Hv = p.n_v_heads, dv = p.v_head_dim;
  Tensor qkv = s.lin_qkv.slice(0, T), conv = s.lin_conv.slice(0, T), z = s.lin_z.slice(0, T);
  Tensor a = s.lin_a.slice(0, T), b = s.lin_b.slice(0, T), o = s.lin_out.slice(0, T);
  ops.matmul(h, w.in_qkv, qkv, Tensor(), h_q8);  // [T, 2 Hk dk + Hv dv]
  ops.matmul(h, w.in_z, z, Tensor(), h_q8);      // [T, Hv dv]
  ops.matmul(h, w.in_b, b, Tensor(), h_q8);      // [T, Hv]
  ops.matmul(h, w.in_a, a, Tensor(), h_q8);      // [T, Hv]
  const StateLayer st = ctx.kv.state(static_cast<int32_t>(l));
  ops.ssm_conv(ctx.batch, qkv, w.conv, st.conv, conv);
  p.a_log = w.a_log;
  p.dt_bias = w.dt_bias;
  ops.gated_delta_rule(p, ctx.batch, conv, a, b, st.ssm, o);  // [T, Hv dv]
  const Tensor heads = o.reshape({T * Hv, dv});
  ops.rms_norm(norm, heads, w.norm, heads);
  if (w.sigmoid_gate)
    ops.sigmoid_mul(z, o, o);  // RMSNorm(o) * sigmoid(z)
  else
    ops.swiglu(z, o, o);  // RMSNorm(o) * silu(z)
  ctx.dump_if("linear_attn_out", l, o);
  ops.matmul(o, w.out, out, Tensor());  // [T, H]
  tp_all_reduce(ctx, out);  // tensor parallel: the value heads' partial sums
}

}  // namespace ft
