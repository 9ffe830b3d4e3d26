// CUDA vs CPU: DeepSeek-V4's ops (hc_pre, hc_post, swiglu_clamp, moe_route_sqrtsoftplus, compress_kv,
// indexer_topk, attention_compressed) on the same random F32 inputs; values within 1e-4 relative L2
// (F32 activations on both), indices exactly; over quantized pages (--kv-cache-dtype fp8 / q8_0) the
// stored codes and scales byte for byte; the entries kept in the KV pages' entry rows (KvLayer::e:
// compress_kv writes only the windows a step closes, indexer_topk and attention_compressed read them).
#include <algorithm>
#include <array>
#include <numeric>

#include "backend/op_harness.h"
#include "quant/kv_quant.h"

namespace ft::testing {
namespace {

class CudaDeepseekV4 : public GpuTest {
 protected:
  std::vector<float> host_read(const Tensor& t) {
    return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  std::vector<int32_t> host_read_i32(const Tensor& t) {
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  Tensor dev(const std::vector<float>& v, std::vector<int64_t> shape) { return arena().dev_from(v, DType::F32, shape); }
  /** compress_kv, indexer_topk and attention_compressed with the device's KV pages in `pages` (F32 or
   *  BF16; the activations F32 on both sides, the CPU's pages F32). */
  void check_compressor_indexer_attention(DType pages);
  /** compress_kv and attention_compressed over quantized pages of `kvd` (F8_E4M3 or Q8_0). */
  void check_quantized_pages(DType kvd);
  std::vector<uint8_t> read_bytes(const Tensor& d) {
    std::vector<uint8_t> out(static_cast<size_t>(d.bytes()));
    gpu().copy(d, Tensor(out.data(), d.dtype, d.shape.data(), d.ndim));
    gpu().synchronize();
    return out;
  }
  static constexpr double kTight = 1e-4;
};

TEST_F(CudaDeepseekV4, HyperConnectionsAndClampedSwiglu) {
  const int n = 4, T = 5, H = 64, M = (2 + n) * n;
  const auto streams = rand_bf16(T * n * H, 1), mixes = rand_bf16(T * M, 2, -2, 2), base = rand_bf16(M, 3),
             scale = rand_bf16(3, 4, 0.5f, 1.5f), y = rand_bf16(T * H, 5);
  const HyperConnParams p{n, 20, 1e-6f};
  Tensor hc = arena().host_f32(std::vector<float>(T * H), {T, H}), hp = arena().host_f32(std::vector<float>(T * n), {T, n}),
         hm = arena().host_f32(std::vector<float>(T * n * n), {T, n * n});
  cpu().hc_pre(p, arena().host_f32(streams, {T, n * H}), arena().host_f32(mixes, {T, M}), arena().host_f32(base, {M}),
               arena().host_f32(scale, {3}), hc, hp, hm);
  Tensor dc = arena().dev_poisoned(DType::F32, {T, H}), dp = arena().dev_poisoned(DType::F32, {T, n}),
         dm = arena().dev_poisoned(DType::F32, {T, n * n});
  gpu().hc_pre(p, dev(streams, {T, n * H}), dev(mixes, {T, M}), dev(base, {M}), dev(scale, {3}), dc, dp, dm);
  EXPECT_LE(rel_l2(arena().read(dc), host_read(hc)), kTight);
  EXPECT_LE(rel_l2(arena().read(dp), host_read(hp)), kTight);
  EXPECT_LE(rel_l2(arena().read(dm), host_read(hm)), kTight);

  Tensor ho = arena().host_f32(std::vector<float>(T * n * H), {T, n * H});
  cpu().hc_post(p, arena().host_f32(streams, {T, n * H}), arena().host_f32(y, {T, H}), hp, hm, ho);
  Tensor dout = arena().dev_poisoned(DType::F32, {T, n * H});
  gpu().hc_post(p, dev(streams, {T, n * H}), dev(y, {T, H}), dev(host_read(hp), {T, n}), dev(host_read(hm), {T, n * n}),
                dout);
  EXPECT_LE(rel_l2(arena().read(dout), host_read(ho)), kTight);

  const auto g = rand_bf16(T * H, 6, -15, 15), u = rand_bf16(T * H, 7, -15, 15);
  Tensor hs = arena().host_f32(std::vector<float>(T * H), {T, H});
  cpu().swiglu_clamp(arena().host_f32(g, {T, H}), arena().host_f32(u, {T, H}), 10.0f, hs);
  Tensor ds = arena().dev_poisoned(DType::F32, {T, H});
  gpu().swiglu_clamp(dev(g, {T, H}), dev(u, {T, H}), 10.0f, ds);
  EXPECT_LE(rel_l2(arena().read(ds), host_read(hs)), kTight);
}

TEST_F(CudaDeepseekV4, SqrtSoftplusRouterLearnedAndHash) {
  const int T = 9, E = 16, k = 4, V = 32;
  const auto logits = rand_bf16(T * E, 8, -4, 4), bias = rand_bf16(E, 9, -0.5f, 0.5f);
  std::vector<int32_t> tokens(T), table(V * k);
  for (int t = 0; t < T; ++t) tokens[t] = (t * 7) % V;
  for (int i = 0; i < V * k; ++i) table[i] = (i * 5 + i / k) % E;
  for (bool hash : {false, true}) {
    RouterParams cp;
    cp.n_expert_used = k, cp.norm_topk_prob = true, cp.scaling = 1.5f;
    RouterParams gp = cp;
    if (!hash) cp.bias = arena().host_f32(bias, {E}), gp.bias = dev(bias, {E});
    Tensor hi = arena().host_i32(std::vector<int32_t>(T * k), {T, k}), hw = arena().host_f32(std::vector<float>(T * k), {T, k});
    cpu().moe_route_sqrtsoftplus(cp, arena().host_f32(logits, {T, E}), hash ? arena().host_i32(tokens, {T}) : Tensor(),
                                 hash ? arena().host_i32(table, {V, k}) : Tensor(), hi, hw);
    Tensor di = arena().dev_i32(std::vector<int32_t>(T * k, -7), {T, k}), dw = arena().dev_poisoned(DType::F32, {T, k});
    gpu().moe_route_sqrtsoftplus(gp, dev(logits, {T, E}), hash ? arena().dev_i32(tokens, {T}) : Tensor(),
                                 hash ? arena().dev_i32(table, {V, k}) : Tensor(), di, dw);
    EXPECT_EQ(arena().read_i32(di), host_read_i32(hi)) << (hash ? "hash" : "learned");
    EXPECT_LE(rel_l2(arena().read(dw), host_read(hw)), kTight);
  }
}

TEST_F(CudaDeepseekV4, SqrtSoftplusRouterManyExpertsWithTies) {
  // DeepSeek-V4-Flash's width (256 experts, top-6) over 40 tokens whose logits take 5 values, so
  // most picks tie and each must go to the lower id as the CPU's scan does, across the warp's lanes.
  const int T = 40, E = 256, k = 6;
  std::vector<float> logits(T * E);
  for (int i = 0; i < T * E; ++i) logits[i] = static_cast<float>((i * 37 + i / E * 11) % 5) - 2.0f;
  RouterParams cp;
  cp.n_expert_used = k, cp.norm_topk_prob = true, cp.scaling = 2.5f;
  RouterParams gp = cp;
  Tensor hi = arena().host_i32(std::vector<int32_t>(T * k), {T, k}), hw = arena().host_f32(std::vector<float>(T * k), {T, k});
  cpu().moe_route_sqrtsoftplus(cp, arena().host_f32(logits, {T, E}), Tensor(), Tensor(), hi, hw);
  Tensor di = arena().dev_i32(std::vector<int32_t>(T * k, -7), {T, k}), dw = arena().dev_poisoned(DType::F32, {T, k});
  gpu().moe_route_sqrtsoftplus(gp, dev(logits, {T, E}), Tensor(), Tensor(), di, dw);
  EXPECT_EQ(arena().read_i32(di), host_read_i32(hi));
  EXPECT_LE(rel_l2(arena().read(dw), host_read(hw)), kTight);
}

// The inputs are bf16 values, so BF16 pages hold them exactly and the same bound holds.
TEST_F(CudaDeepseekV4, CompressorIndexerAndAttention) { check_compressor_indexer_attention(DType::F32); }
TEST_F(CudaDeepseekV4, CompressorIndexerAndAttentionOverBf16Pages) { check_compressor_indexer_attention(DType::BF16); }

TEST_F(CudaDeepseekV4, CompressorAndAttentionOverFp8Pages) { check_quantized_pages(DType::F8_E4M3); }
TEST_F(CudaDeepseekV4, CompressorAndAttentionOverQ8Pages) { check_quantized_pages(DType::Q8_0); }

TEST_F(CudaDeepseekV4, EntryRowsWrittenStepByStepAndRead) {
  // Two sequences over two steps (positions 0..29 and 0..13, then 30..36 and 14..21): compress_kv into
  // entry rows [n_pages, 2, 1, hd + 3] at column 1 (rate 4, pages of 8: two rows a page), the second
  // step pooling only the windows it closes; the rows (unwritten ones zero) within 1e-4 of the CPU's,
  // then the indexer (keys at column 1) and the attention (a view of the CPU's rows, entries at
  // column 0) over the CPU's rows.
  const int hd = 32, rate = 4, page = 8, n_pages = 16, max_blocks = 6, nh = 4, ih = 2, K = 3, window = 8;
  const int W = 2 * hd, Wv = 2 * W, rows = page / rate, We = hd + 3, ecol = 1;
  std::vector<int32_t> table(2 * max_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  const std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.01f};
  RopeParams rope;
  rope.head_dim = hd, rope.n_rot = 8;
  const auto ape = rand_bf16(rate * W, 21), nw = rand_bf16(hd, 22, 0.5f, 1.5f);
  auto batch = [&](const std::vector<int32_t>& pos, const std::vector<int32_t>& si, int32_t split, bool gpu_side) {
    auto i32 = [&](const std::vector<int32_t>& v, std::vector<int64_t> sh) {
      return gpu_side ? arena().dev_i32(v, sh) : arena().host_i32(v, sh);
    };
    const auto T = static_cast<int32_t>(pos.size());
    return BatchInfo{T, 2, max_blocks, 37, i32(pos, {T}), i32(si, {T}), i32({0, split, T}, {3}),
                     i32(table, {2, max_blocks}), Tensor(), Tensor()};
  };
  KvLayer hkv{Tensor(), arena().host_f32(std::vector<float>(n_pages * page * Wv), {n_pages, page, 1, Wv})};
  KvLayer dkv{Tensor(), arena().dev_from(std::vector<float>(n_pages * page * Wv), DType::F32, {n_pages, page, 1, Wv})};
  hkv.e = arena().host_f32(std::vector<float>(n_pages * rows * We), {n_pages, rows, 1, We});
  dkv.e = arena().dev_from(std::vector<float>(n_pages * rows * We), DType::F32, {n_pages, rows, 1, We});
  CompressParams cp;
  cp.rate = rate, cp.head_dim = hd, cp.overlap = true, cp.entry_col = ecol, cp.rope = rope;
  for (const auto& [lo0, hi0, lo1, hi1] : {std::array<int, 4>{0, 30, 0, 14}, {30, 37, 14, 22}}) {
    std::vector<int32_t> pos, si;
    for (int p = lo0; p < hi0; ++p) pos.push_back(p), si.push_back(0);
    for (int p = lo1; p < hi1; ++p) pos.push_back(p), si.push_back(1);
    const auto T = static_cast<int>(pos.size());
    const auto proj = rand_bf16(T * 2 * W, 23 + lo0, -2, 2);
    cp.rope.inv_freq = arena().host_f32(inv, {4});
    cpu().compress_kv(cp, batch(pos, si, hi0 - lo0, false), arena().host_f32(proj, {T, 2 * W}), hkv,
                      arena().host_f32(ape, {rate, W}), arena().host_f32(nw, {hd}), hkv.e);
    cp.rope.inv_freq = dev(inv, {4});
    gpu().compress_kv(cp, batch(pos, si, hi0 - lo0, true), dev(proj, {T, 2 * W}), dkv, dev(ape, {rate, W}),
                      dev(nw, {hd}), dkv.e);
  }
  const std::vector<float> he = host_read(hkv.e), de = arena().read(dkv.e);
  EXPECT_LE(rel_l2(de, he), kTight);
  int written = 0;
  for (size_t r = 0; r < he.size() / We; ++r) written += he[r * We + ecol] != 0.0f;
  EXPECT_EQ(written, 37 / rate + 22 / rate);

  // Queries of the last step's tokens read the CPU's rows.
  std::vector<int32_t> pos, si;
  for (int p = 30; p < 37; ++p) pos.push_back(p), si.push_back(0);
  for (int p = 14; p < 22; ++p) pos.push_back(p), si.push_back(1);
  const int T = static_cast<int>(pos.size());
  const BatchInfo hb = batch(pos, si, 7, false), db = batch(pos, si, 7, true);
  const Tensor de_cpu = dev(he, {n_pages, rows, 1, We});
  const auto q = rand_bf16(T * ih * hd, 24, 0.1f, 1.0f), w = rand_bf16(T * ih, 25, 0.1f, 1.0f);
  IndexerParams ip{ih, hd, rate, K, rope};
  ip.key_col = ecol, ip.page_size = page;
  Tensor hids = arena().host_i32(std::vector<int32_t>(T * K), {T, K});
  ip.rope.inv_freq = arena().host_f32(inv, {4});
  cpu().indexer_topk(ip, hb, arena().host_f32(q, {T, ih * hd}), arena().host_f32(w, {T, ih}), hkv.e, hids);
  Tensor dids = arena().dev_i32(std::vector<int32_t>(T * K, -7), {T, K});
  ip.rope.inv_freq = dev(inv, {4});
  gpu().indexer_topk(ip, db, dev(q, {T, ih * hd}), dev(w, {T, ih}), de_cpu, dids);
  std::vector<int32_t> gi = arena().read_i32(dids), ci = host_read_i32(hids);
  for (int t = 0; t < T; ++t) {
    std::sort(gi.begin() + t * K, gi.begin() + (t + 1) * K);
    std::sort(ci.begin() + t * K, ci.begin() + (t + 1) * K);
  }
  EXPECT_EQ(gi, ci);

  // Attention: its entries are columns [0, hd) of the rows, so both read rows whose entry starts there.
  std::vector<float> shifted(he.size() - ecol);
  std::copy(he.begin() + ecol, he.end(), shifted.begin());
  shifted.resize(he.size(), 0.0f);
  const auto kvrows = rand_bf16(37 * hd, 26), qa = rand_bf16(T * nh * hd, 27, -2, 2), sinks = rand_bf16(nh, 28);
  std::vector<float> keys(n_pages * page * hd, 0.0f);
  for (int p = 0; p < 37; ++p)
    for (int s = 0; s < 2; ++s)
      std::copy_n(kvrows.begin() + p * hd, hd, keys.begin() + (table[s * max_blocks + p / page] * page + p % page) * hd);
  KvLayer hk{arena().host_f32(keys, {n_pages, page, 1, hd}), Tensor()};
  KvLayer dk{dev(keys, {n_pages, page, 1, hd}), Tensor()};
  for (const bool selected : {false, true}) {
    CompressedAttentionParams ap;
    ap.n_head = nh, ap.head_dim = hd, ap.scale = 1.0f / std::sqrt(static_cast<float>(hd)), ap.window = window;
    ap.rate = rate, ap.rope = rope;
    ap.rope.inv_freq = arena().host_f32(inv, {4});
    ap.sinks = arena().host_f32(sinks, {nh});
    Tensor hout = arena().host_f32(std::vector<float>(T * nh * hd), {T, nh * hd});
    cpu().attention_compressed(ap, hb, arena().host_f32(qa, {T, nh * hd}), hk,
                               arena().host_f32(shifted, {n_pages, rows, 1, We}), selected ? hids : Tensor(), hout);
    ap.rope.inv_freq = dev(inv, {4});
    ap.sinks = dev(sinks, {nh});
    Tensor dout = arena().dev_poisoned(DType::F32, {T, nh * hd});
    gpu().attention_compressed(ap, db, dev(qa, {T, nh * hd}), dk, dev(shifted, {n_pages, rows, 1, We}),
                               selected ? arena().dev_i32(host_read_i32(hids), {T, K}) : Tensor(), dout);
    EXPECT_LE(rel_l2(arena().read(dout), host_read(hout)), kTight) << (selected ? "selected" : "all entries");
  }
}

void CudaDeepseekV4::check_quantized_pages(DType kvd) {
  // Two sequences as check_compressor_indexer_attention; the value pages hold the CSA compressor's
  // 4 hd columns then the indexer's 4 id, in heads of 16 (ModelConfig::kv_v_head_dim), and this
  // compressor writes from column 4 hd (the indexer's place: whole heads, the others left zero).
  const int hd = 16, rate = 4, page = 8, n_pages = 16, max_blocks = 6, nh = 4, window = 8, dv = 16;
  const int W = 2 * hd, Wv = 4 * hd + 2 * W, col = 4 * hd;
  std::vector<int32_t> table(2 * max_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  std::vector<int32_t> pos, si;
  for (int p = 0; p < 37; ++p) pos.push_back(p), si.push_back(0);
  for (int p = 0; p < 22; ++p) pos.push_back(p), si.push_back(1);
  const int T = static_cast<int>(pos.size()), S = 2, M = 37 / rate;
  auto batch = [&](bool gpu_side) {
    auto i32 = [&](const std::vector<int32_t>& v, std::vector<int64_t> s) {
      return gpu_side ? arena().dev_i32(v, s) : arena().host_i32(v, s);
    };
    return BatchInfo{T, S, max_blocks, 37, i32(pos, {T}), i32(si, {T}), i32({0, 37, T}, {3}),
                     i32(table, {S, max_blocks}), Tensor(), Tensor()};
  };
  const BatchInfo hb = batch(false), db = batch(true);
  const std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.01f};
  RopeParams rope;
  rope.head_dim = hd, rope.n_rot = 8;
  const DType code = kv_code_dtype(kvd), sdt = kv_scale_dtype(kvd);
  const int64_t sbytes = sdt == DType::F32 ? 4 : 2;
  // Host pages (codes, scales) for the CPU, the same zero bytes on the device.
  auto pages = [&](std::vector<uint8_t>& c, std::vector<uint8_t>& sc, int64_t heads, int64_t dim, bool gpu_side) {
    const int64_t sph = kv_scales_per_head(kvd, dim);
    c.assign(static_cast<size_t>(n_pages * page * heads * dim), 0);
    sc.assign(static_cast<size_t>(n_pages * page * heads * sph * sbytes), 0);
    if (gpu_side)
      return std::pair{arena().dev_bytes(c, code, {n_pages, page, heads, dim}),
                       arena().dev_bytes(sc, sdt, {n_pages, page, heads, sph})};
    return std::pair{Tensor(c.data(), code, {n_pages, page, heads, dim}), Tensor(sc.data(), sdt, {n_pages, page, heads, sph})};
  };
  std::vector<uint8_t> hvc, hvs, dvc, dvs, hkc, hks, dkc, dks;
  const auto [hv, hvscale] = pages(hvc, hvs, Wv / dv, dv, false);
  const auto [gv, gvscale] = pages(dvc, dvs, Wv / dv, dv, true);
  CompressParams cp;
  cp.rate = rate, cp.head_dim = hd, cp.overlap = true, cp.col = col;
  const auto proj = rand_bf16(T * 2 * W, 10, -2, 2), ape = rand_bf16(rate * W, 11), nw = rand_bf16(hd, 12, 0.5f, 1.5f);
  Tensor hent = arena().host_f32(std::vector<float>(S * M * hd), {S, M, hd});
  Tensor dent = arena().dev_poisoned(DType::F32, {S, M, hd});
  cp.rope = rope, cp.rope.inv_freq = arena().host_f32(inv, {4});
  cpu().compress_kv(cp, hb, arena().host_f32(proj, {T, 2 * W}), KvLayer{Tensor(), hv, Tensor(), hvscale},
                    arena().host_f32(ape, {rate, W}), arena().host_f32(nw, {hd}), hent);
  cp.rope.inv_freq = dev(inv, {4});
  gpu().compress_kv(cp, db, dev(proj, {T, 2 * W}), KvLayer{Tensor(), gv, Tensor(), gvscale}, dev(ape, {rate, W}),
                    dev(nw, {hd}), dent);
  EXPECT_EQ(read_bytes(gv), hvc) << "value page codes";
  EXPECT_EQ(read_bytes(gvscale), hvs) << "value page scales";
  const std::vector<float> gent = arena().read(dent), cent = host_read(hent);
  std::vector<float> g_used, c_used;
  for (int s = 0; s < S; ++s)
    for (int w = 0; w < (s == 0 ? 37 : 22) / rate; ++w)
      for (int d = 0; d < hd; ++d) g_used.push_back(gent[(s * M + w) * hd + d]), c_used.push_back(cent[(s * M + w) * hd + d]);
  EXPECT_LE(rel_l2(g_used, c_used), kTight);

  // Attention over quantized key pages (K = V, written by kv_write with the pages as both).
  const auto [hk, hkscale] = pages(hkc, hks, 1, hd, false);
  const auto [gk, gkscale] = pages(dkc, dks, 1, hd, true);
  const auto kvrows = rand_bf16(T * hd, 15, -3, 3), qa = rand_bf16(T * nh * hd, 16, -2, 2), sinks = rand_bf16(nh, 17);
  cpu().kv_write(hb, arena().host_f32(kvrows, {T, hd}), arena().host_f32(kvrows, {T, hd}), KvLayer{hk, hk, hkscale, hkscale});
  gpu().kv_write(db, dev(kvrows, {T, hd}), dev(kvrows, {T, hd}), KvLayer{gk, gk, gkscale, gkscale});
  EXPECT_EQ(read_bytes(gk), hkc) << "key page codes";
  EXPECT_EQ(read_bytes(gkscale), hks) << "key page scales";
  for (const bool window_only : {false, true}) {
    CompressedAttentionParams ap;
    ap.n_head = nh, ap.head_dim = hd, ap.scale = 1.0f / std::sqrt(static_cast<float>(hd)), ap.window = window;
    ap.rate = window_only ? 1 : rate, ap.rope = rope;
    ap.rope.inv_freq = arena().host_f32(inv, {4});
    ap.sinks = arena().host_f32(sinks, {nh});
    Tensor hout = arena().host_f32(std::vector<float>(T * nh * hd), {T, nh * hd});
    cpu().attention_compressed(ap, hb, arena().host_f32(qa, {T, nh * hd}), KvLayer{hk, Tensor(), hkscale, Tensor()},
                               window_only ? Tensor() : hent, Tensor(), hout);
    ap.rope.inv_freq = dev(inv, {4});
    ap.sinks = dev(sinks, {nh});
    Tensor dout = arena().dev_poisoned(DType::F32, {T, nh * hd});
    gpu().attention_compressed(ap, db, dev(qa, {T, nh * hd}), KvLayer{gk, Tensor(), gkscale, Tensor()},
                               window_only ? Tensor() : dev(cent, {S, M, hd}), Tensor(), dout);
    EXPECT_LE(rel_l2(arena().read(dout), host_read(hout)), kTight) << (window_only ? "window only" : "all entries");
  }
}

void CudaDeepseekV4::check_compressor_indexer_attention(DType pages) {
  // Two sequences: a 37-token prefill and a 2-token continuation of a 20-token cached prefix.
  const int hd = 32, id = 16, rate = 4, page = 8, n_pages = 16, max_blocks = 6, nh = 4, ih = 2, K = 3, window = 8;
  const int W = 2 * hd, Wv = 4 * hd + 4 * id;  // CSA compressor then indexer columns
  std::vector<int32_t> table(2 * max_blocks);
  std::iota(table.begin(), table.end(), 0);
  std::reverse(table.begin(), table.end());
  std::vector<int32_t> pos, si;
  for (int p = 0; p < 37; ++p) pos.push_back(p), si.push_back(0);
  for (int p = 0; p < 22; ++p) pos.push_back(p), si.push_back(1);
  const int T = static_cast<int>(pos.size()), S = 2;
  auto batch = [&](bool gpu_side) {
    auto i32 = [&](const std::vector<int32_t>& v, std::vector<int64_t> s) {
      return gpu_side ? arena().dev_i32(v, s) : arena().host_i32(v, s);
    };
    BatchInfo b{T, S, max_blocks, 37, i32(pos, {T}), i32(si, {T}), i32({0, 37, T}, {3}), i32(table, {S, max_blocks}),
                Tensor()};
    return b;
  };
  const BatchInfo hb = batch(false), db = batch(true);
  const std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.01f};
  RopeParams rope;
  rope.head_dim = hd, rope.n_rot = 8;
  CompressParams cp;
  cp.rate = rate, cp.head_dim = hd, cp.overlap = true, cp.col = 0;
  const auto proj = rand_bf16(T * 2 * W, 10, -2, 2), ape = rand_bf16(rate * W, 11), nw = rand_bf16(hd, 12, 0.5f, 1.5f);
  const int M = 37 / rate;
  auto run_compress = [&](Ops& ops, bool gpu_side, KvLayer kv, Tensor ent) {
    auto t = [&](const std::vector<float>& v, std::vector<int64_t> s) {
      return gpu_side ? dev(v, s) : arena().host_f32(v, s);
    };
    CompressParams p = cp;
    p.rope = rope, p.rope.inv_freq = t(inv, {4});
    ops.compress_kv(p, gpu_side ? db : hb, t(proj, {T, 2 * W}), kv, t(ape, {rate, W}), t(nw, {hd}), ent);
  };
  KvLayer hkv{arena().host_f32(std::vector<float>(n_pages * page * hd), {n_pages, page, 1, hd}),
              arena().host_f32(std::vector<float>(n_pages * page * Wv), {n_pages, page, 1, Wv})};
  KvLayer dkv{arena().dev(pages, {n_pages, page, 1, hd}), arena().dev(pages, {n_pages, page, 1, Wv})};
  Tensor hent = arena().host_f32(std::vector<float>(S * M * hd), {S, M, hd});
  Tensor dent = arena().dev_poisoned(DType::F32, {S, M, hd});
  run_compress(cpu(), false, hkv, hent);
  run_compress(gpu(), true, dkv, dent);
  const std::vector<float> gent = arena().read(dent), cent = host_read(hent);
  // Sequence 1 has 22 / 4 = 5 entries: compare the rows each sequence has.
  std::vector<float> g_used, c_used;
  for (int s = 0; s < S; ++s)
    for (int w = 0; w < (s == 0 ? 37 : 22) / rate; ++w)
      for (int d = 0; d < hd; ++d) g_used.push_back(gent[(s * M + w) * hd + d]), c_used.push_back(cent[(s * M + w) * hd + d]);
  EXPECT_LE(rel_l2(g_used, c_used), kTight);

  // Indexer: positive queries, keys and weights, so no ReLU zeros tie, and both must pick the same
  // sets (planted exact ties: cuda_indexer_ties_test.cpp).
  const auto q = rand_bf16(T * ih * hd, 13, 0.1f, 1.0f), w = rand_bf16(T * ih, 14, 0.1f, 1.0f),
             ikeys = rand_bf16(S * M * hd, 18, 0.1f, 1.0f);
  IndexerParams ip{ih, hd, rate, K, rope};
  Tensor hids = arena().host_i32(std::vector<int32_t>(T * K), {T, K});
  ip.rope.inv_freq = arena().host_f32(inv, {4});
  cpu().indexer_topk(ip, hb, arena().host_f32(q, {T, ih * hd}), arena().host_f32(w, {T, ih}),
                     arena().host_f32(ikeys, {S, M, hd}), hids);
  Tensor dids = arena().dev_i32(std::vector<int32_t>(T * K, -7), {T, K});
  ip.rope.inv_freq = dev(inv, {4});
  gpu().indexer_topk(ip, db, dev(q, {T, ih * hd}), dev(w, {T, ih}), dev(ikeys, {S, M, hd}), dids);
  std::vector<int32_t> gi = arena().read_i32(dids), ci = host_read_i32(hids);
  for (int t = 0; t < T; ++t) {  // the same set per query, in any order
    std::sort(gi.begin() + t * K, gi.begin() + (t + 1) * K);
    std::sort(ci.begin() + t * K, ci.begin() + (t + 1) * K);
  }
  EXPECT_EQ(gi, ci);
  (void)id;

  // Attention: window keys from the key pages (written by kv_write), entries all visible / selected.
  const auto kvrows = rand_bf16(T * hd, 15), qa = rand_bf16(T * nh * hd, 16, -2, 2), sinks = rand_bf16(nh, 17);
  cpu().kv_write(hb, arena().host_f32(kvrows, {T, hd}), arena().host_f32(kvrows, {T, hd}), KvLayer{hkv.k, hkv.k});
  gpu().kv_write(db, dev(kvrows, {T, hd}), dev(kvrows, {T, hd}), KvLayer{dkv.k, dkv.k});
  // Modes: all visible entries, the indexer's picks, and a sliding_attention layer (no entries; its
  // main RoPE here with a YaRN-style attention factor on cos and sin).
  for (int mode : {0, 1, 2}) {
    const bool selected = mode == 1, window_only = mode == 2;
    CompressedAttentionParams ap;
    ap.n_head = nh, ap.head_dim = hd, ap.scale = 1.0f / std::sqrt(static_cast<float>(hd)), ap.window = window;
    ap.rate = window_only ? 1 : rate, ap.rope = rope;
    if (window_only) ap.rope.attn_factor = 1.2772589f;
    ap.rope.inv_freq = arena().host_f32(inv, {4});
    ap.sinks = arena().host_f32(sinks, {nh});
    Tensor hout = arena().host_f32(std::vector<float>(T * nh * hd), {T, nh * hd});
    cpu().attention_compressed(ap, hb, arena().host_f32(qa, {T, nh * hd}), hkv, window_only ? Tensor() : hent,
                               selected ? hids : Tensor(), hout);
    ap.rope.inv_freq = dev(inv, {4});
    ap.sinks = dev(sinks, {nh});
    Tensor dout = arena().dev_poisoned(DType::F32, {T, nh * hd});
    gpu().attention_compressed(ap, db, dev(qa, {T, nh * hd}), dkv, window_only ? Tensor() : dev(cent, {S, M, hd}),
                               selected ? arena().dev_i32(host_read_i32(hids), {T, K}) : Tensor(), dout);
    EXPECT_LE(rel_l2(arena().read(dout), host_read(hout)), kTight)
        << (window_only ? "window only" : selected ? "selected" : "all entries");
  }
}

}  // namespace
}  // namespace ft::testing
