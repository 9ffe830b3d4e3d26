#include "model/gated_delta_net.h"

#include <cmath>

#include <fmt/format.h>

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
                                          std::vector<Buffer>& storage) {
  const int64_t H = c.n_embd, Hk = c.lin_n_k_heads, Hv = c.lin_n_v_heads, dk = c.lin_k_dim, dv = c.lin_v_dim;
  const int64_t C = c.lin_conv_dim(), K = c.lin_conv_kernel, r = Hv / Hk;
  auto name = [&](const char* gguf, const char* hf) { return layer_weight(l, gguf, hf); };
  GatedDeltaNetWeights w;
  const WeightName qkvz = name("", "linear_attn.in_proj_qkvz");
  // in_proj_ba / ssm_ba: per key head g, b (r rows) then a (r rows).
  std::vector<int64_t> b_rows, a_rows;
  for (int64_t g = 0; g < Hk; ++g)
    for (int64_t i = 0; i < r; ++i) b_rows.push_back(g * 2 * r + i), a_rows.push_back(g * 2 * r + r + i);
  if (ld.is_gguf()) {  // llama.cpp's qwen3next (b and a fused in ssm_ba) or qwen35 (ssm_beta, ssm_alpha)
    w.in_qkv = ld.get(name("attn_qkv", ""), {C, H});
    w.in_z = ld.get(name("attn_gate", ""), {Hv * dv, H});
    if (ld.has(name("ssm_ba", ""))) {
      w.in_b = ld.get_rows(name("ssm_ba", ""), {2 * Hv, H}, b_rows);
      w.in_a = ld.get_rows(name("ssm_ba", ""), {2 * Hv, H}, a_rows);
    } else {
      w.in_b = ld.get(name("ssm_beta", ""), {Hv, H});
      w.in_a = ld.get(name("ssm_alpha", ""), {Hv, H});
    }
  } else if (ld.has(qkvz)) {  // Qwen3-Next: per key head g, rows q (dk), k (dk), v (r dv), z (r dv)
    const int64_t group = 2 * dk + 2 * r * dv;
    std::vector<int64_t> qkv_rows, z_rows;
    for (int part = 0; part < 3; ++part)  // q of every group, then k, then v
      for (int64_t g = 0; g < Hk; ++g) {
        const int64_t off = part == 0 ? 0 : part == 1 ? dk : 2 * dk, n = part == 2 ? r * dv : dk;
        for (int64_t i = 0; i < n; ++i) qkv_rows.push_back(g * group + off + i);
      }
    for (int64_t g = 0; g < Hk; ++g)
      for (int64_t i = 0; i < r * dv; ++i) z_rows.push_back(g * group + 2 * dk + r * dv + i);
    w.in_qkv = ld.get_rows(qkvz, {Hk * group, H}, qkv_rows);
    w.in_z = ld.get_rows(qkvz, {Hk * group, H}, z_rows);
    const WeightName ba = name("", "linear_attn.in_proj_ba");
    w.in_b = ld.get_rows(ba, {2 * Hv, H}, b_rows);
    w.in_a = ld.get_rows(ba, {2 * Hv, H}, a_rows);
  } else {  // Qwen3.5: separate projections, q, k, v already side by side
    w.in_qkv = ld.get(name("", "linear_attn.in_proj_qkv"), {C, H});
    w.in_z = ld.get(name("", "linear_attn.in_proj_z"), {Hv * dv, H});
    w.in_b = ld.get(name("", "linear_attn.in_proj_b"), {Hv, H});
    w.in_a = ld.get(name("", "linear_attn.in_proj_a"), {Hv, H});
  }
  if (ld.is_gguf()) {
    w.conv = ld.get_f32({fmt::format("blk.{}.ssm_conv1d.weight", l), ""}, {C, K}, WeightKind::kMatrix);
    const Tensor a = ld.host_f32({fmt::format("blk.{}.ssm_a", l), ""}, {Hv});
    std::vector<float> a_log(static_cast<size_t>(Hv));
    for (int64_t h = 0; h < Hv; ++h) {
      const float v = a.ptr<float>()[h];
      if (!(v < 0.0f))
        fail(ErrorCode::kInvalidFile, "tensor blk.{}.ssm_a: entry {} is {}; llama.cpp stores -exp(A_log) (< 0)", l, h, v);
      a_log[static_cast<size_t>(h)] = std::log(-v);
    }
    w.a_log = upload_f32(ops, a_log, storage);
  } else {
    w.conv = ld.get_f32({"", fmt::format("model.layers.{}.linear_attn.conv1d.weight", l)}, {C, 1, K}).reshape({C, K});
    w.a_log = ld.get_f32({"", fmt::format("model.layers.{}.linear_attn.A_log", l)}, {Hv});
  }
  w.dt_bias = ld.get_f32({fmt::format("blk.{}.ssm_dt.bias", l), fmt::format("model.layers.{}.linear_attn.dt_bias", l)}, {Hv});
  w.norm = ld.get(name("ssm_norm", "linear_attn.norm"), {dv}, WeightKind::kVector);
  w.out = ld.get(name("ssm_out", "linear_attn.out_proj"), {H, Hv * dv});
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
}

}  // namespace ft
