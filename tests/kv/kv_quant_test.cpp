// Quantized KV pages (--kv-cache-dtype fp8 / q8_0, quant/kv_quant.h): round trips of head rows and of
// a page written by kv_write, the KV cache's bytes per token against bf16, and the CPU attention
// kernels over quantized pages against the same kernels over f32 pages holding the dequantized values.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "kv/kv_cache.h"
#include "quant/kv_quant.h"
#include "tensor/half.h"
#include "util/error.h"

namespace ft {
namespace {

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = d(rng);
  return v;
}

/** Bound of |x - dequant(quant(x))| for one value of a head row whose block holds amax: fp8 rounds
 *  to 3 mantissa bits (half an ulp: 2^-4 relative) above the subnormals (spacing 2^-9 of the scale);
 *  q8_0 to half a step d = amax / 127, plus d's own f16 rounding (2^-11 relative) times 127. */
float bound(DType dt, float x, float amax) {
  if (dt == DType::F8_E4M3) return std::fabs(x) * 0.0625f + amax / 448.0f * std::ldexp(1.0f, -10) + 1e-30f;
  const float d = amax / 127.0f;
  return 0.5f * d + 127.0f * d * std::ldexp(1.0f, -11) + 1e-30f;
}

void expect_round_trip(DType dt, const std::vector<float>& x, int64_t dim) {
  std::vector<uint8_t> codes(static_cast<size_t>(dim));
  std::vector<uint8_t> scales(static_cast<size_t>(kv_scales_per_head(dt, dim) * 4));
  std::vector<float> y(static_cast<size_t>(dim));
  kv_quantize_head(dt, x.data(), dim, codes.data(), scales.data());
  kv_dequantize_head(dt, codes.data(), scales.data(), dim, y.data());
  const int64_t block = dt == DType::Q8_0 ? 32 : dim;
  for (int64_t lo = 0; lo < dim; lo += block) {
    float amax = 0;
    int64_t at = lo;
    for (int64_t i = lo; i < std::min(dim, lo + block); ++i)
      if (std::fabs(x[i]) > amax) amax = std::fabs(x[i]), at = i;
    for (int64_t i = lo; i < std::min(dim, lo + block); ++i)
      EXPECT_LE(std::fabs(y[i] - x[i]), bound(dt, x[i], amax)) << dtype_name(dt) << " dim " << dim << " i " << i;
    // The largest value of a block is the top code: 448 (0x7e) for fp8, +-127 for q8_0.
    if (amax == 0.0f) EXPECT_EQ(y[at], 0.0f);
    else if (dt == DType::F8_E4M3) EXPECT_EQ(codes[at] & 0x7f, 0x7e);
    else EXPECT_EQ(std::abs(static_cast<int8_t>(codes[at])), 127);
  }
}

TEST(KvQuant, HeadRowsRoundTripWithinHalfACode) {
  for (DType dt : {DType::F8_E4M3, DType::Q8_0})
    for (int64_t dim : {8, 16, 40, 128}) {
      std::vector<float> x = random_vec(dim, static_cast<uint32_t>(dim), 3.0f);
      x[static_cast<size_t>(dim / 2)] = 0.0f;
      expect_round_trip(dt, x, dim);
      expect_round_trip(dt, std::vector<float>(static_cast<size_t>(dim), 0.0f), dim);  // a zero row stays zero
    }
  // The layouts: fp8 one F32 scale a head, q8_0 an F16 d per 32 values (llama.cpp's Q8_0 math).
  EXPECT_EQ(kv_scales_per_head(DType::F8_E4M3, 128), 1);
  EXPECT_EQ(kv_scales_per_head(DType::Q8_0, 128), 4);
  EXPECT_EQ(kv_scales_per_head(DType::Q8_0, 40), 2);
  const float x[32] = {127.0f, -63.5f, 1.0f};
  uint8_t q[32];
  uint16_t d;
  kv_quantize_head(DType::Q8_0, x, 32, q, &d);
  EXPECT_EQ(f16_to_f32(d), 1.0f);
  EXPECT_EQ(static_cast<int8_t>(q[0]), 127);
  EXPECT_EQ(static_cast<int8_t>(q[1]), -64);  // round half away from zero, as ggml's roundf
  EXPECT_EQ(static_cast<int8_t>(q[2]), 1);
}

TEST(KvQuant, BytesPerTokenAreAboutHalfOfBf16) {
  // 2 layers of 8 KV heads of 128: bf16 2 x 2 x 8 x 128 x 2 = 8192 bytes a token.
  KvCacheConfig c{2, 8, 128, 16, 64, DType::BF16};
  EXPECT_EQ(KvCache::bytes_per_token(c), 8192);
  c.dtype = DType::F8_E4M3;
  EXPECT_EQ(KvCache::bytes_per_token(c), 2 * 2 * 8 * (128 + 4));  // 4224: 0.516 of bf16
  c.dtype = DType::Q8_0;
  EXPECT_EQ(KvCache::bytes_per_token(c), 2 * 2 * 8 * (128 + 4 * 2));  // 4352: 34/64 of bf16
  // MLA (DeepSeek-V3): latent 512 in the key pages, RoPE key 64 in the value pages, 61 layers.
  KvCacheConfig m{61, 1, 512, 64, 64, DType::BF16};
  m.v_n_head = 1, m.v_head_dim = 64;
  EXPECT_EQ(KvCache::bytes_per_token(m), 61 * 576 * 2);
  m.dtype = DType::F8_E4M3;
  EXPECT_EQ(KvCache::bytes_per_token(m), 61 * (576 + 8));
  m.dtype = DType::Q8_0;
  EXPECT_EQ(KvCache::bytes_per_token(m), 61 * (576 + 2 * (16 + 2)));
  // The allocated cache matches its figure.
  CpuOps ops(1);
  KvCacheConfig small{2, 2, 16, 16, 64, DType::Q8_0};
  KvCache kv(ops, small);
  EXPECT_EQ(kv.bytes(), 4 * 16 * KvCache::bytes_per_token(small));
  const KvLayer l = kv.layer(1);
  EXPECT_EQ(l.k.dtype, DType::I8);
  EXPECT_TRUE(l.k.has_shape({4, 16, 2, 16}));
  EXPECT_EQ(l.k_scale.dtype, DType::F16);
  EXPECT_TRUE(l.v_scale.has_shape({4, 16, 2, 1}));
  small.dtype = DType::Q4_K;
  EXPECT_THROW(KvCache(ops, small), Error);
}

TEST(KvQuant, HeadViewsOfQuantizedPagesKeepTheirScalesOrAreRefused) {
  CpuOps ops(1);
  KvCacheConfig c{1, 2, 64, 16, 32, DType::F8_E4M3};  // pages of 2 heads of 64: 2 scales a token
  KvCache kv(ops, c);
  const KvLayer narrow = kv_head_view(kv.layer(0), 2, 16);  // 2 heads of 16 (Gemma 4's sliding layers)
  EXPECT_TRUE(narrow.k.has_shape({2, 16, 2, 16}));
  EXPECT_TRUE(narrow.k_scale.has_shape({2, 16, 2, 1}));
  EXPECT_EQ(narrow.k_scale.data, kv.layer(0).k_scale.data);
  // 4 heads of 32 fit the codes but need 4 scales a token: refused, never read past the scales.
  EXPECT_THROW(kv_head_view(kv.layer(0), 4, 32), Error);
  c.dtype = DType::F32;
  KvCache f(ops, c);
  EXPECT_TRUE(kv_head_view(f.layer(0), 4, 32).k.has_shape({2, 16, 4, 32}));
  EXPECT_FALSE(kv_head_view(f.layer(0), 4, 32).quantized());
}

/** A batch of one sequence of positions 0..n-1 over pages `table` (host vectors kept alive by the caller). */
struct Batch {
  std::vector<int32_t> pos, si, st, table;
  BatchInfo info() {
    const auto T = static_cast<int32_t>(pos.size()), B = static_cast<int32_t>(table.size());
    return BatchInfo{T,
                     1,
                     B,
                     T,
                     Tensor(pos.data(), DType::I32, {T}),
                     Tensor(si.data(), DType::I32, {T}),
                     Tensor(st.data(), DType::I32, {2}),
                     Tensor(table.data(), DType::I32, {1, B}),
                     Tensor()};
  }
};

Batch one_sequence(int32_t n, std::vector<int32_t> table) {
  Batch b;
  for (int32_t p = 0; p < n; ++p) b.pos.push_back(p), b.si.push_back(0);
  b.st = {0, n};
  b.table = std::move(table);
  return b;
}

/** F32 pages holding the dequantized values of quantized `q` (same shapes). */
void dequantize_into(const KvLayer& q, DType dt, KvLayer f) {
  for (const auto& [src, scales, dst] : {std::tuple<const Tensor*, const Tensor*, Tensor*>{&q.k, &q.k_scale, &f.k},
                                         {&q.v, &q.v_scale, &f.v}}) {
    const int64_t rows = src->dim(0) * src->dim(1) * src->dim(2), dim = src->dim(3);
    const int64_t sb = scales->dim(3) * dtype_bytes(scales->dtype, 1);
    for (int64_t r = 0; r < rows; ++r)
      kv_dequantize_head(dt, static_cast<const uint8_t*>(src->data) + r * dim,
                         static_cast<const uint8_t*>(scales->data) + r * sb, dim, dst->ptr<float>() + r * dim);
  }
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::fabs(double{a.ptr<float>()[i]} - b.ptr<float>()[i]));
  return m;
}

TEST(KvQuant, KvWriteQuantizesAPageAndAttentionReadsItBack) {
  CpuOps ops(1);
  const int32_t T = 40, G = 2, D = 48, H = 4, page = 16;
  for (DType dt : {DType::F8_E4M3, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(dt));
    KvCacheConfig c{1, G, D, page, 64, dt};
    KvCache qkv(ops, c);
    c.dtype = DType::F32;
    KvCache fkv(ops, c);
    Batch b = one_sequence(T, {3, 0, 2});  // pages out of order
    const BatchInfo bi = b.info();
    std::vector<float> k = random_vec(T * G * D, 1, 2.0f), v = random_vec(T * G * D, 2), q = random_vec(T * H * D, 3);
    ops.kv_write(bi, Tensor(k.data(), DType::F32, {T, G * D}), Tensor(v.data(), DType::F32, {T, G * D}), qkv.layer(0));
    // The written page rows dequantize to the inputs within half a code.
    const KvLayer ql = qkv.layer(0);
    const int64_t sb = ql.k_scale.dim(3) * dtype_bytes(ql.k_scale.dtype, 1);
    std::vector<float> row(D);
    for (int32_t t = 0; t < T; ++t)
      for (int32_t g = 0; g < G; ++g) {
        const int64_t r = (int64_t{b.table[t / page]} * page + t % page) * G + g;
        kv_dequantize_head(dt, static_cast<const uint8_t*>(ql.k.data) + r * D,
                           static_cast<const uint8_t*>(ql.k_scale.data) + r * sb, D, row.data());
        for (int32_t i = 0; i < D; ++i) {
          const float x = k[(t * G + g) * D + i];
          ASSERT_LE(std::fabs(row[i] - x), bound(dt, x, 8.0f * 2.0f)) << t << " " << g << " " << i;
        }
      }
    dequantize_into(ql, dt, fkv.layer(0));
    // attention and attention_qsa over the quantized pages: the f32 kernel over the dequantized values.
    Tensor qt(q.data(), DType::F32, {T, H * D});
    std::vector<float> o1(T * H * D), o2(T * H * D);
    Tensor out_q(o1.data(), DType::F32, {T, H * D}), out_f(o2.data(), DType::F32, {T, H * D});
    AttentionParams p;
    p.n_head = H, p.n_head_kv = G, p.head_dim = D, p.scale = 0.15f;
    ops.attention(p, bi, qt, qkv.layer(0), out_q);
    ops.attention(p, bi, qt, fkv.layer(0), out_f);
    EXPECT_LE(max_abs_diff(out_q, out_f), 1e-6);
    p.sliding_window = 7;
    ops.attention(p, bi, qt, qkv.layer(0), out_q);
    ops.attention(p, bi, qt, fkv.layer(0), out_f);
    EXPECT_LE(max_abs_diff(out_q, out_f), 1e-6);
    p.sliding_window = 0;
    std::vector<int32_t> sel(T * 2, -1);
    for (int32_t t = 0; t < T; ++t)
      if (t >= 8) sel[t * 2] = 0;  // block 0 of 8 positions once complete
    Tensor selected(sel.data(), DType::I32, {T, 2});
    ops.attention_qsa(p, 8, bi, qt, qkv.layer(0), selected, out_q);
    ops.attention_qsa(p, 8, bi, qt, fkv.layer(0), selected, out_f);
    EXPECT_LE(max_abs_diff(out_q, out_f), 1e-6);
    // Pages of another type or scales of the wrong shape are refused.
    KvLayer bad = qkv.layer(0);
    bad.v_scale = bad.v_scale.slice(0, 1);
    EXPECT_THROW(ops.attention(p, bi, qt, bad, out_q), Error);
  }
}

TEST(KvQuant, MlaLatentsAndRopeKeysReadBackAsTheirDequantizedValues) {
  CpuOps ops(1);
  const int32_t T = 33, H = 4, R = 32, P = 8, page = 16;
  for (DType dt : {DType::F8_E4M3, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(dt));
    KvCacheConfig c{1, 1, R, page, 64, dt};
    c.v_n_head = 1, c.v_head_dim = P;
    KvCache qkv(ops, c);
    c.dtype = DType::F32;
    KvCache fkv(ops, c);
    Batch b = one_sequence(T, {1, 3, 0});
    const BatchInfo bi = b.info();
    std::vector<float> lat = random_vec(T * R, 4), rk = random_vec(T * P, 5), ql = random_vec(T * H * R, 6),
                       qr = random_vec(T * H * P, 7);
    ops.kv_write(bi, Tensor(lat.data(), DType::F32, {T, R}), Tensor(rk.data(), DType::F32, {T, P}), qkv.layer(0));
    dequantize_into(qkv.layer(0), dt, fkv.layer(0));
    std::vector<float> o1(T * H * R), o2(T * H * R);
    Tensor out_q(o1.data(), DType::F32, {T, H * R}), out_f(o2.data(), DType::F32, {T, H * R});
    const MlaAttentionParams p{H, R, P, 0.2f};
    Tensor qlt(ql.data(), DType::F32, {T, H * R}), qrt(qr.data(), DType::F32, {T, H * P});
    ops.attention_mla(p, bi, qlt, qrt, qkv.layer(0), out_q);
    ops.attention_mla(p, bi, qlt, qrt, fkv.layer(0), out_f);
    EXPECT_LE(max_abs_diff(out_q, out_f), 1e-6);
    // And the dequantized latents are close to the written ones: the output too.
    std::vector<float> o3(T * H * R);
    KvCacheConfig exact = c;
    KvCache ekv(ops, exact);
    ops.kv_write(bi, Tensor(lat.data(), DType::F32, {T, R}), Tensor(rk.data(), DType::F32, {T, P}), ekv.layer(0));
    Tensor out_e(o3.data(), DType::F32, {T, H * R});
    ops.attention_mla(p, bi, qlt, qrt, ekv.layer(0), out_e);
    EXPECT_LE(max_abs_diff(out_q, out_e), dt == DType::F8_E4M3 ? 0.15 : 0.05);
  }
}

}  // namespace
}  // namespace ft
