// CUDA vs CPU: Qwen4-Exp's ops (ngram_hash, ple_gate, stream_weighted_sum, attention_qsa), the
// indexer's per-query top-k and ssm_conv with the PLE's zero-padded dilated taps (10 > 8), each on a
// prefill step (two sequences: one from position 0, one continuing its cached prefix / state slot)
// and then a decode step (one token each). Ids and histories exactly; values within 1e-5 relative L2
// with F32 activations on both, 1e-2 with BF16 activations on the GPU. attention_qsa also over
// quantized pages (--kv-cache-dtype fp8 / q8_0; value rows in heads of 8), written by kv_write on
// each side: codes and scales byte for byte, outputs within 1e-4 (F32) / 1e-2 (BF16).
#include <algorithm>
#include <numeric>
#include <random>

#include "backend/op_harness.h"
#include "quant/kv_quant.h"

namespace ft::testing {
namespace {

class CudaQwen4Exp : public GpuBatchTest {
 protected:
  static constexpr double kTight = 1e-5;
  std::vector<float> host_read(const Tensor& t) {
    return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
  }
  std::vector<int32_t> host_read_i32(const Tensor& t) {
    return std::vector<int32_t>(t.ptr<int32_t>(), t.ptr<int32_t>() + t.numel());
  }
  /** The batch of `runs` (first position, count) with state slots, on either side. */
  BatchInfo with_slots(const HostBatch& hb, const std::vector<int32_t>& table, int32_t max_blocks,
                       const std::vector<int32_t>& slots, bool on_gpu) {
    BatchInfo b = info(hb, table, max_blocks, on_gpu);
    const int64_t S = static_cast<int64_t>(slots.size());
    b.state_slots = on_gpu ? arena().dev_i32(slots, {S}) : arena().host_i32(slots, {S});
    return b;
  }
  Tensor host_i64(const std::vector<int64_t>& v) {
    std::vector<uint8_t> bytes(v.size() * 8);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return arena().host_bytes(bytes, DType::I64, {static_cast<int64_t>(v.size())});
  }
  Tensor dev_i64(const std::vector<int64_t>& v) {
    std::vector<uint8_t> bytes(v.size() * 8);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    return arena().dev_bytes(bytes, DType::I64, {static_cast<int64_t>(v.size())});
  }
};

TEST_F(CudaQwen4Exp, NgramHashPrefillThenDecode) {
  const int32_t n = 3, heads = 4, eos = 2, ctx = n - 1, nh = ctx * heads, slots = 3;
  std::mt19937_64 rng(7);
  std::vector<int64_t> mult(n), sizes(nh), offsets(nh);
  for (int64_t& m : mult) m = static_cast<int64_t>(rng() | 1u);  // odd, large: the products wrap
  int64_t off = 0;
  for (int32_t h = 0; h < nh; ++h) sizes[h] = 1009 + 6 * h, offsets[h] = off, off += sizes[h];
  const NgramHashParams p{n, heads, eos};
  // Slot histories: slot 0 holds a cached prefix's last tokens (one of them EOS), slot 2 garbage that a
  // sequence at position 0 must not read.
  std::vector<int32_t> hist0 = {eos, 17, 99, 99, 41, 5};
  Tensor hh = arena().host_i32(hist0, {slots, ctx});
  Tensor dh = arena().dev_i32(hist0, {slots, ctx});
  Tensor hm = host_i64(mult), hs = host_i64(sizes), ho = host_i64(offsets);
  Tensor dm = dev_i64(mult), ds = dev_i64(sizes), dof = dev_i64(offsets);
  const std::vector<int32_t> slot_of = {2, 0};
  std::mt19937 trng(3);
  // Step 1: sequence 0 prefills 9 tokens from position 0 (an EOS in the middle), sequence 1 continues
  // at position 6 with 4 tokens. Step 2: one token each.
  for (const auto& runs : {std::vector<std::pair<int32_t, int32_t>>{{0, 9}, {6, 4}},
                           std::vector<std::pair<int32_t, int32_t>>{{9, 1}, {10, 1}}}) {
    const HostBatch b = make(runs);
    std::vector<int32_t> toks(b.T);
    for (int32_t& t : toks) t = static_cast<int32_t>(trng() % 40);
    if (b.T > 4) toks[4] = eos;
    const std::vector<int32_t> table(b.S, 0);
    Tensor hids = arena().host_i32(std::vector<int32_t>(b.T * nh), {b.T, nh});
    Tensor dids = arena().dev_poisoned(DType::I32, {b.T, nh});
    cpu().ngram_hash(p, with_slots(b, table, 1, slot_of, false), arena().host_i32(toks, {b.T}), hm, hs, ho, hh, hids);
    gpu().ngram_hash(p, with_slots(b, table, 1, slot_of, true), arena().dev_i32(toks, {b.T}), dm, ds, dof, dh, dids);
    EXPECT_EQ(arena().read_i32(dids), host_read_i32(hids)) << b.T << " tokens";
    EXPECT_EQ(arena().read_i32(dh), host_read_i32(hh)) << "histories after " << b.T << " tokens";
  }
  // Slot 1 belongs to no sequence of either step: untouched.
  const std::vector<int32_t> h = arena().read_i32(dh);
  EXPECT_EQ(h[2], 99);
  EXPECT_EQ(h[3], 99);
}

TEST_F(CudaQwen4Exp, PleGateAndStreamWeightedSum) {
  const int64_t n = 4, D = 64;
  for (const int64_t T : {int64_t{7}, int64_t{1}}) {  // prefill rows, then one decode row
    const auto key = rand_bf16(T * n * D, 1 + T), query = rand_bf16(T * n * D, 2 + T), value = rand_bf16(T * D, 3 + T),
               w = rand_bf16(n * D, 4 + T, 0.2f, 2.0f);
    Tensor hout = arena().host_f32(std::vector<float>(T * n * D), {T, n * D});
    cpu().ple_gate(arena().host_f32(key, {T, n * D}), arena().host_f32(query, {T, n * D}), arena().host_f32(w, {n * D}),
                   arena().host_f32(value, {T, D}), hout);
    Tensor hsum = arena().host_f32(std::vector<float>(T * D), {T, D});
    cpu().stream_weighted_sum(arena().host_f32(key, {T, n * D}), arena().host_f32(w, {n * D}), hsum);
    for (const DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(act == DType::F32 ? "f32" : "bf16") + ", T " + std::to_string(T));
      const double tol = act == DType::F32 ? kTight : kTol;
      Tensor dout = arena().dev_poisoned(act, {T, n * D});
      gpu().ple_gate(arena().dev_from(key, act, {T, n * D}), arena().dev_from(query, act, {T, n * D}),
                     arena().dev_from(w, DType::F32, {n * D}), arena().dev_from(value, act, {T, D}), dout);
      EXPECT_LE(compare(dout, host_read(hout)), tol);
      Tensor dsum = arena().dev_poisoned(act, {T, D});
      gpu().stream_weighted_sum(arena().dev_from(key, act, {T, n * D}), arena().dev_from(w, DType::F32, {n * D}), dsum);
      EXPECT_LE(compare(dsum, host_read(hsum)), tol);
    }
  }
}

TEST_F(CudaQwen4Exp, SparseAttentionOverSelectedBlocksAndTail) {
  const int32_t H = 4, G = 2, D = 32, block = 4, page = 8, n_pages = 8, max_blocks = 4, K = 3;
  const int32_t Wv = G * D + 16;  // wide value rows: the indexer's key follows the values
  const std::vector<int32_t> table = {7, 5, 3, 1, 6, 4, 2, 0};
  const auto kd = rand_bf16(n_pages * page * G * D, 21), vd = rand_bf16(n_pages * page * Wv, 22);
  std::mt19937 rng(5);
  // Prefill: sequence 0 from position 0 (23 tokens), sequence 1 continuing at 10 (5 tokens); then a
  // decode step of each. Keys of every position are already in the pages (random contents).
  for (const auto& runs : {std::vector<std::pair<int32_t, int32_t>>{{0, 23}, {10, 5}},
                           std::vector<std::pair<int32_t, int32_t>>{{23, 1}, {15, 1}}}) {
    const HostBatch b = make(runs);
    std::vector<int32_t> sel(b.T * K, -1);
    for (int32_t t = 0; t < b.T; ++t) {
      const int32_t nb = (b.pos[t] + 1) / block;  // blocks the query can see whole
      std::vector<int32_t> blocks(nb);
      std::iota(blocks.begin(), blocks.end(), 0);
      std::shuffle(blocks.begin(), blocks.end(), rng);
      for (int32_t j = 0; j < std::min(K, nb); ++j) sel[t * K + j] = blocks[j];
      if (nb > K && t % 3 == 0) sel[t * K + 1] = -1;  // a hole in the selection
    }
    const auto q = rand_bf16(b.T * H * D, 23 + b.T, -2, 2);
    AttentionParams ap;
    ap.n_head = H, ap.n_head_kv = G, ap.head_dim = D, ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
    Tensor hout = arena().host_f32(std::vector<float>(b.T * H * D), {b.T, H * D});
    KvLayer hkv{arena().host_f32(kd, {n_pages, page, G, D}), arena().host_f32(vd, {n_pages, page, 1, Wv})};
    cpu().attention_qsa(ap, block, info(b, table, max_blocks, false), arena().host_f32(q, {b.T, H * D}), hkv,
                        arena().host_i32(sel, {b.T, K}), hout);
    for (const DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(act == DType::F32 ? "f32" : "bf16") + ", T " + std::to_string(b.T));
      KvLayer dkv{arena().dev_from(kd, act, {n_pages, page, G, D}), arena().dev_from(vd, act, {n_pages, page, 1, Wv})};
      Tensor dout = arena().dev_poisoned(act, {b.T, H * D});
      gpu().attention_qsa(ap, block, info(b, table, max_blocks, true), arena().dev_from(q, act, {b.T, H * D}), dkv,
                          arena().dev_i32(sel, {b.T, K}), dout);
      EXPECT_LE(compare(dout, host_read(hout)), act == DType::F32 ? 1e-4 : kTol);
    }
  }
}

TEST_F(CudaQwen4Exp, SparseAttentionOverQuantizedPages) {
  const int32_t H = 4, G = 2, D = 32, block = 4, page = 8, n_pages = 8, max_blocks = 4, K = 3, dv = 8, L = 28;
  const int32_t Wv = G * D + 2 * dv;  // the values, then the indexer's key and gates, in heads of 8
  const std::vector<int32_t> table = {7, 5, 3, 1, 6, 4, 2, 0};
  const auto kd = rand_bf16(2 * L * G * D, 31, -3, 3), vd = rand_bf16(2 * L * Wv, 32);
  auto read_bytes = [&](const Tensor& d) {
    std::vector<uint8_t> out(static_cast<size_t>(d.bytes()));
    gpu().copy(d, Tensor(out.data(), d.dtype, d.shape.data(), d.ndim));
    gpu().synchronize();
    return out;
  };
  for (const DType kvd : {DType::F8_E4M3, DType::Q8_0}) {
    const DType code = kv_code_dtype(kvd), sdt = kv_scale_dtype(kvd);
    const int64_t sbytes = sdt == DType::F32 ? 4 : 2, sk = kv_scales_per_head(kvd, D), sv = kv_scales_per_head(kvd, dv);
    for (const DType act : {DType::F32, DType::BF16}) {
      SCOPED_TRACE(std::string(dtype_name(kvd)) + (act == DType::F32 ? " f32" : " bf16"));
      std::vector<uint8_t> kc(static_cast<size_t>(n_pages * page * G * D)), vc(static_cast<size_t>(n_pages * page * Wv));
      std::vector<uint8_t> ks(static_cast<size_t>(n_pages * page * G * sk * sbytes)),
          vs(static_cast<size_t>(n_pages * page * (Wv / dv) * sv * sbytes));
      const KvLayer hkv{Tensor(kc.data(), code, {n_pages, page, G, D}), Tensor(vc.data(), code, {n_pages, page, Wv / dv, dv}),
                        Tensor(ks.data(), sdt, {n_pages, page, G, sk}), Tensor(vs.data(), sdt, {n_pages, page, Wv / dv, sv})};
      const KvLayer dkv{arena().dev_bytes(kc, code, {n_pages, page, G, D}), arena().dev_bytes(vc, code, {n_pages, page, Wv / dv, dv}),
                        arena().dev_bytes(ks, sdt, {n_pages, page, G, sk}), arena().dev_bytes(vs, sdt, {n_pages, page, Wv / dv, sv})};
      // Every position of both sequences (28 and 16 tokens) written on each side.
      const HostBatch wb = make({{0, L}, {0, 16}});
      const std::vector<float> kw(kd.begin(), kd.begin() + wb.T * G * D), vw(vd.begin(), vd.begin() + wb.T * Wv);
      cpu().kv_write(info(wb, table, max_blocks, false), arena().host_f32(kw, {wb.T, G * D}),
                     arena().host_f32(vw, {wb.T, Wv}), hkv);
      gpu().kv_write(info(wb, table, max_blocks, true), arena().dev_from(kw, act, {wb.T, G * D}),
                     arena().dev_from(vw, act, {wb.T, Wv}), dkv);
      EXPECT_EQ(read_bytes(dkv.k), kc);
      EXPECT_EQ(read_bytes(dkv.v), vc);
      EXPECT_EQ(read_bytes(dkv.k_scale), ks);
      EXPECT_EQ(read_bytes(dkv.v_scale), vs);
      // A prefill chunk of each sequence, then a decode step of each.
      std::mt19937 rng(9);
      for (const auto& runs : {std::vector<std::pair<int32_t, int32_t>>{{20, 7}, {9, 6}},
                               std::vector<std::pair<int32_t, int32_t>>{{27, 1}, {15, 1}}}) {
        const HostBatch b = make(runs);
        std::vector<int32_t> sel(b.T * K, -1);
        for (int32_t t = 0; t < b.T; ++t) {
          const int32_t nb = (b.pos[t] + 1) / block;
          std::vector<int32_t> blocks(nb);
          std::iota(blocks.begin(), blocks.end(), 0);
          std::shuffle(blocks.begin(), blocks.end(), rng);
          for (int32_t j = 0; j < std::min(K, nb); ++j) sel[t * K + j] = blocks[j];
        }
        const auto q = rand_bf16(b.T * H * D, 40 + b.T, -2, 2);
        AttentionParams ap;
        ap.n_head = H, ap.n_head_kv = G, ap.head_dim = D, ap.scale = 1.0f / std::sqrt(static_cast<float>(D));
        Tensor hout = arena().host_f32(std::vector<float>(b.T * H * D), {b.T, H * D});
        cpu().attention_qsa(ap, block, info(b, table, max_blocks, false), arena().host_f32(q, {b.T, H * D}), hkv,
                            arena().host_i32(sel, {b.T, K}), hout);
        Tensor dout = arena().dev_poisoned(act, {b.T, H * D});
        gpu().attention_qsa(ap, block, info(b, table, max_blocks, true), arena().dev_from(q, act, {b.T, H * D}), dkv,
                            arena().dev_i32(sel, {b.T, K}), dout);
        EXPECT_LE(compare(dout, host_read(hout)), act == DType::F32 ? 1e-4 : kTol) << "T " << b.T;
      }
    }
  }
}

TEST_F(CudaQwen4Exp, IndexerPerQueryPicksTheCpuSets) {
  // Positive queries, keys and weights (no ReLU-zero ties, where the backends break ties differently).
  const int32_t ih = 2, hd = 16, rate = 4, K = 3, max_blocks = 4;
  const std::vector<int32_t> table = {7, 5, 3, 1, 6, 4, 2, 0};
  const std::vector<float> inv = {1.0f, 0.3f, 0.05f, 0.01f};
  for (const auto& runs : {std::vector<std::pair<int32_t, int32_t>>{{0, 23}, {10, 5}},
                           std::vector<std::pair<int32_t, int32_t>>{{23, 1}, {15, 1}}}) {
    const HostBatch b = make(runs);
    const int32_t M = b.max_kv_len / rate;
    const auto q = rand_bf16(b.T * ih * hd, 31 + b.T, 0.1f, 1.0f), w = rand_bf16(b.T * ih, 32 + b.T, 0.1f, 1.0f),
               keys = rand_bf16(b.S * M * hd, 33 + b.T, 0.1f, 1.0f);
    RopeParams rope;
    rope.mode = RopeMode::kNormal, rope.head_dim = hd, rope.n_rot = 8;
    IndexerParams ip{ih, hd, rate, K, rope};
    ip.per_query = true;
    ip.rope.inv_freq = arena().host_f32(inv, {4});
    Tensor hids = arena().host_i32(std::vector<int32_t>(b.T * K), {b.T, K});
    cpu().indexer_topk(ip, info(b, table, max_blocks, false), arena().host_f32(q, {b.T, ih * hd}),
                       arena().host_f32(w, {b.T, ih}), arena().host_f32(keys, {b.S, M, hd}), hids);
    ip.rope.inv_freq = arena().dev_from(inv, DType::F32, {4});
    Tensor dids = arena().dev_poisoned(DType::I32, {b.T, K});
    gpu().indexer_topk(ip, info(b, table, max_blocks, true), arena().dev_from(q, DType::F32, {b.T, ih * hd}),
                       arena().dev_from(w, DType::F32, {b.T, ih}), arena().dev_from(keys, DType::F32, {b.S, M, hd}),
                       dids);
    std::vector<int32_t> gi = arena().read_i32(dids), ci = host_read_i32(hids);
    for (int32_t t = 0; t < b.T; ++t) {  // the same set per query, in any order
      std::sort(gi.begin() + t * K, gi.begin() + (t + 1) * K);
      std::sort(ci.begin() + t * K, ci.begin() + (t + 1) * K);
    }
    EXPECT_EQ(gi, ci) << b.T << " tokens";
  }
}

TEST_F(CudaQwen4Exp, DilatedPleConvCarriesItsWindow) {
  // The PLE's conv: kernel 4 at dilation 3 as 10 zero-padded taps, a window of 9 rows per slot.
  const int64_t C = 96, taps = 10, slots = 3;
  std::vector<float> w(C * taps, 0.0f);
  const auto wk = rand_bf16(C * 4, 41);
  for (int64_t c = 0; c < C; ++c)
    for (int64_t j = 0; j < 4; ++j) w[c * taps + j * 3] = wk[c * 4 + j];
  const auto st0 = rand_bf16(slots * (taps - 1) * C, 42);
  Tensor hst = arena().host_f32(st0, {slots, taps - 1, C});
  Tensor dst = arena().dev_from(st0, DType::F32, {slots, taps - 1, C});
  const std::vector<int32_t> slot_of = {2, 0};
  for (const auto& runs : {std::vector<std::pair<int32_t, int32_t>>{{0, 13}, {6, 5}},
                           std::vector<std::pair<int32_t, int32_t>>{{13, 1}, {11, 1}}}) {
    const HostBatch b = make(runs);
    const auto x = rand_bf16(b.T * C, 43 + b.T);
    const std::vector<int32_t> table(b.S, 0);
    Tensor hout = arena().host_f32(std::vector<float>(b.T * C), {b.T, C});
    cpu().ssm_conv(with_slots(b, table, 1, slot_of, false), arena().host_f32(x, {b.T, C}),
                   arena().host_f32(w, {C, taps}), hst, hout);
    Tensor dout = arena().dev_poisoned(DType::F32, {b.T, C});
    gpu().ssm_conv(with_slots(b, table, 1, slot_of, true), arena().dev_from(x, DType::F32, {b.T, C}),
                   arena().dev_from(w, DType::F32, {C, taps}), dst, dout);
    EXPECT_LE(compare(dout, host_read(hout)), kTight) << b.T << " tokens";
    EXPECT_LE(compare(dst, host_read(hst)), kTight) << "states after " << b.T << " tokens";
  }
}

}  // namespace
}  // namespace ft::testing
