#include "model/mla.h"

#include <cmath>
#include <cstring>

#include "dist/tensor_parallel.h"
#include "kv/kv_cache.h"
#include "quant/quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

/** `host` (a host buffer holding `view`) made resident; the buffer is kept in `storage` while the
 *  backend reads it in place (CPU), dropped once copied (CUDA). */
Tensor resident(Ops& ops, Buffer host, const Tensor& view, std::vector<Buffer>& storage) {
  Buffer dev;
  Tensor t = ops.make_resident(view, dev);
  if (!dev.empty()) storage.push_back(std::move(dev));
  if (t.data == view.data) storage.push_back(std::move(host));
  return t;
}

/** Rows of `src` [H * (a + b), K] regrouped per head: the first a rows of each head's a + b, then
 *  the last b, as two resident matrices [H * a, K] and [H * b, K] (any row-wise dtype). */
std::pair<Tensor, Tensor> split_head_rows(Ops& ops, const Tensor& src, int64_t H, int64_t a, int64_t b,
                                          std::vector<Buffer>& storage) {
  const int64_t K = src.dim(1), row = dtype_bytes(src.dtype, K);
  Tensor out[2];
  for (int part = 0; part < 2; ++part) {
    const int64_t n = part == 0 ? a : b, off = part == 0 ? 0 : a;
    Buffer buf = Buffer::host(H * n * row);
    for (int64_t h = 0; h < H; ++h)
      std::memcpy(static_cast<char*>(buf.data()) + h * n * row,
                  static_cast<const char*>(src.data) + (h * (a + b) + off) * row, static_cast<size_t>(n * row));
    const Tensor view(buf.data(), src.dtype, {H * n, K});
    out[part] = resident(ops, std::move(buf), view, storage);
  }
  return {out[0], out[1]};
}

/** A [H, N, K] weight in `dt` (F32, F16 or BF16) from a function giving element (h, n, k) as float. */
template <typename Get>
Tensor per_head(Ops& ops, DType dt, int64_t H, int64_t N, int64_t K, Get get, std::vector<Buffer>& storage) {
  Buffer buf = Buffer::host(dtype_bytes(dt, H * N * K));
  for (int64_t h = 0; h < H; ++h)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        const float v = get(h, n, k);
        const int64_t i = (h * N + n) * K + k;
        if (dt == DType::F32) static_cast<float*>(buf.data())[i] = v;
        else if (dt == DType::BF16) static_cast<uint16_t*>(buf.data())[i] = f32_to_bf16(v);
        else static_cast<uint16_t*>(buf.data())[i] = f32_to_f16(v);
      }
  const Tensor view(buf.data(), dt, {H, N, K});
  return resident(ops, std::move(buf), view, storage);
}

/** Rows of a host matrix [R, K] as floats. */
std::vector<float> dequantized(const Tensor& t) {
  const int64_t R = t.dim(0), K = t.dim(1), row = dtype_bytes(t.dtype, K);
  std::vector<float> out(static_cast<size_t>(R * K));
  for (int64_t r = 0; r < R; ++r)
    dequantize_row(t.dtype, static_cast<const char*>(t.data) + r * row, out.data() + r * K, K);
  return out;
}

DType head_dtype(DType src) { return src == DType::BF16 || src == DType::F16 ? src : DType::F32; }

}  // namespace

MlaSpec mla_spec(const ModelConfig& c, const Tensor& inv_freq, float attn_factor) {
  MlaSpec s;
  double scale = 1.0 / std::sqrt(static_cast<double>(c.qk_nope_dim + c.qk_rope_dim));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == "yarn" && rs.mscale_all_dim > 0.0) {
    const double m = yarn_mscale(rs.factor, rs.mscale_all_dim);
    scale *= m * m;
  }
  s.attn = {static_cast<int32_t>(c.n_head), static_cast<int32_t>(c.kv_lora_rank), static_cast<int32_t>(c.qk_rope_dim),
            static_cast<float>(scale)};
  s.rope = {c.rope_mode, static_cast<int32_t>(c.qk_rope_dim), static_cast<int32_t>(c.qk_rope_dim), inv_freq,
            attn_factor};
  s.norm = {static_cast<float>(c.rms_eps), 0.0f};
  s.qk_nope = static_cast<int32_t>(c.qk_nope_dim);
  s.v_head_dim = static_cast<int32_t>(c.v_head_dim);
  s.q_lora_rank = static_cast<int32_t>(c.q_lora_rank);
  return s;
}

MlaWeights load_mla(WeightLoader& ld, Ops& ops, const ModelConfig& c, int64_t l, std::vector<Buffer>& storage,
                    const dist::TpShard& tp) {
  const int64_t H = c.n_embd, nope = c.qk_nope_dim, rope = c.qk_rope_dim, R = c.kv_lora_rank, vd = c.v_head_dim,
                qr = c.q_lora_rank;
  const dist::TpRange heads = dist::tp_heads(c.n_head, tp);
  const int64_t nh_all = c.n_head, nh = heads.count, h0 = heads.begin;  // the checkpoint's heads; the rank's
  MlaWeights w;
  Tensor q;  // host [nh * (nope + rope), qr or H]
  if (qr > 0) {
    w.wq_a = ld.get(layer_weight(l, "attn_q_a", "self_attn.q_a_proj"), {qr, H});
    w.q_a_norm = ld.get(layer_weight(l, "attn_q_a_norm", "self_attn.q_a_layernorm"), {qr}, WeightKind::kVector);
    q = ld.host(layer_weight(l, "attn_q_b", "self_attn.q_b_proj"), {nh_all * (nope + rope), qr});
  } else {
    q = ld.host(layer_weight(l, "attn_q", "self_attn.q_proj"), {nh_all * (nope + rope), H});
  }
  q = q.slice(h0 * (nope + rope), nh * (nope + rope));  // the rank's heads' rows
  std::tie(w.wq_nope, w.wq_rope) = split_head_rows(ops, q, nh, nope, rope, storage);
  w.wkv_a = ld.get(layer_weight(l, "attn_kv_a_mqa", "self_attn.kv_a_proj_with_mqa"), {R + rope, H});
  w.w_dkv = w.wkv_a.slice(0, R);
  w.w_kr = w.wkv_a.slice(R, rope);
  w.kv_a_norm = ld.get(layer_weight(l, "attn_kv_a_norm", "self_attn.kv_a_layernorm"), {R}, WeightKind::kVector);
  const WeightName k_b = layer_weight(l, "attn_k_b", ""), v_b = layer_weight(l, "attn_v_b", "");
  if (ld.is_gguf() && ld.has(k_b) && ld.has(v_b)) {  // llama.cpp's split (newer converters)
    const Tensor kb = ld.host(k_b, {nh_all, R, nope}).slice(h0, nh), vb = ld.host(v_b, {nh_all, vd, R}).slice(h0, nh);
    const std::vector<float> kf = dequantized(kb.reshape({nh * R, nope})), vf = dequantized(vb.reshape({nh * vd, R}));
    w.w_uk_t = per_head(ops, head_dtype(kb.dtype), nh, R, nope,
                        [&](int64_t h, int64_t n, int64_t k) { return kf[static_cast<size_t>((h * R + n) * nope + k)]; },
                        storage);
    w.w_uv = per_head(ops, head_dtype(vb.dtype), nh, vd, R,
                      [&](int64_t h, int64_t n, int64_t k) { return vf[static_cast<size_t>((h * vd + n) * R + k)]; },
                      storage);
  } else {  // kv_b [nh * (nope + vd), R]: head h's rows are W_UK[h] [nope, R] then W_UV[h] [vd, R]
    const Tensor kvb = ld.host(layer_weight(l, "attn_kv_b", "self_attn.kv_b_proj"), {nh_all * (nope + vd), R})
                           .slice(h0 * (nope + vd), nh * (nope + vd));
    const std::vector<float> f = dequantized(kvb);
    const DType dt = head_dtype(kvb.dtype);
    w.w_uk_t = per_head(ops, dt, nh, R, nope,
                        [&](int64_t h, int64_t n, int64_t k) { return f[static_cast<size_t>((h * (nope + vd) + k) * R + n)]; },
                        storage);
    w.w_uv = per_head(ops, dt, nh, vd, R,
                      [&](int64_t h, int64_t n, int64_t k) {
                        return f[static_cast<size_t>((h * (nope + vd) + nope + n) * R + k)];
                      },
                      storage);
  }
  const WeightName o = layer_weight(l, "attn_output", "self_attn.o_proj");
  w.wo = tp.size == 1 ? ld.get(o, {H, nh * vd}) : ld.get_cols(o, {H, nh_all * vd}, h0 * vd, nh * vd);
  return w;
}

void mla_block(ForwardContext& ctx, int64_t l, const MlaSpec& spec, const MlaWeights& w, const Tensor& h, Tensor out,
               const ActQ8* h_q8) {
  Ops& ops = ctx.ops;
  ForwardState& s = ctx.state;
  const int64_t T = h.rows();
  Tensor q_nope = s.q_nope.slice(0, T), q_pe = s.q_pe.slice(0, T), q_lat = s.q_lat.slice(0, T);
  Tensor kv_c = s.kv_c.slice(0, T), k_pe = s.k_pe.slice(0, T), lat = s.attn_lat.slice(0, T), o = s.attn.slice(0, T);
  const Tensor* qin = &h;
  const ActQ8* qin_q8 = h_q8;
  Tensor q_a;
  ActQ8 q_a_q8;  // q_a's int8 form, written by its norm (h's then goes stale: the projections of h quantize)
  if (!w.wq_a.empty()) {
    q_a = s.q_a.slice(0, T);
    ops.matmul(h, w.wq_a, q_a, Tensor(), h_q8);  // [T, q_lora_rank]
    ops.rms_norm(spec.norm, q_a, w.q_a_norm, q_a, ctx.q8(q_a_q8));
    qin = &q_a, qin_q8 = ctx.q8(q_a_q8);
  }
  ops.matmul(*qin, w.wq_nope, q_nope, Tensor(), qin_q8);  // [T, n_head * qk_nope]
  ops.matmul(*qin, w.wq_rope, q_pe, Tensor(), qin_q8);    // [T, n_head * qk_rope]
  ops.matmul(h, w.w_dkv, kv_c, Tensor(), h_q8);           // [T, kv_lora_rank]
  ops.matmul(h, w.w_kr, k_pe, Tensor(), h_q8);            // [T, qk_rope]
  ops.rms_norm(spec.norm, kv_c, w.kv_a_norm, kv_c);
  ops.rope(spec.rope, q_pe, ctx.batch.positions);
  ops.rope(spec.rope, k_pe, ctx.batch.positions);
  ops.head_matmul(q_nope, w.w_uk_t, q_lat);       // [T, n_head * kv_lora_rank]
  const KvLayer kv = ctx.kv.layer(static_cast<int32_t>(l));
  ops.kv_write(ctx.batch, kv_c, k_pe, kv);
  ops.attention_mla(spec.attn, ctx.batch, q_lat, q_pe, kv, lat);  // [T, n_head * kv_lora_rank]
  ops.head_matmul(lat, w.w_uv, o);                // [T, n_head * v_head_dim]
  ctx.dump_if("kqv_out", l, o);
  ops.matmul(o, w.wo, out, Tensor());             // [T, H]
  tp_all_reduce(ctx, out);  // tensor parallel: the heads' partial sums
}

}  // namespace ft
