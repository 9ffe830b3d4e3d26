// The compressed-KV ops (DeepSeek-V4's compress_kv and attention_compressed, Qwen4-Exp's attention_qsa)
// over quantized KV pages (--kv-cache-dtype fp8 / q8_0) on the CPU: each equals, bit for bit, the same op
// over F32 pages that hold the dequantized values; compress_kv stores each head of its columns as
// kv_write quantizes a head row and leaves the other heads of the row (another compressor's, codes and
// scales) as they were; a chunked prefill stores and pools what one prefill does; value rows of narrow
// heads read as one wide head; columns that are not whole heads are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/kv_quant.h"
#include "tensor/dtype.h"
#include "test_util.h"
#include "util/error.h"

namespace ft::testing {
namespace {

/** Quantized pages [n_pages, page, heads, dim] of `kvd` in host vectors, and their F32 dequantization. */
struct QPages {
  DType kvd;
  int64_t n_pages, page, heads, dim, sph, sbytes;
  std::vector<uint8_t> codes, scales;
  QPages(DType d, int64_t np, int64_t ps, int64_t h, int64_t dm)
      : kvd(d), n_pages(np), page(ps), heads(h), dim(dm), sph(kv_scales_per_head(d, dm)),
        sbytes(dtype_bytes(kv_scale_dtype(d), 1)), codes(static_cast<size_t>(np * ps * h * dm)),
        scales(static_cast<size_t>(np * ps * h * sph * sbytes)) {}
  int64_t rows() const { return n_pages * page * heads; }
  Tensor code_tensor() { return Tensor(codes.data(), kv_code_dtype(kvd), {n_pages, page, heads, dim}); }
  Tensor scale_tensor() { return Tensor(scales.data(), kv_scale_dtype(kvd), {n_pages, page, heads, sph}); }
  /** Every row dequantized, in [n_pages, page, heads * dim] order. */
  std::vector<float> dequantized() const {
    std::vector<float> out(static_cast<size_t>(rows() * dim));
    for (int64_t r = 0; r < rows(); ++r)
      kv_dequantize_head(kvd, codes.data() + r * dim, scales.data() + r * sph * sbytes, dim, out.data() + r * dim);
    return out;
  }
};

/** One sequence's batch over positions `pos` with block table `table`. */
struct Batch {
  std::vector<int32_t> pos, si, ss, table;
  BatchInfo info() {
    BatchInfo b;
    b.n_tokens = static_cast<int32_t>(pos.size()), b.n_seqs = 1, b.max_blocks = static_cast<int32_t>(table.size());
    for (int32_t p : pos) b.max_kv_len = std::max(b.max_kv_len, p + 1);
    si.assign(pos.size(), 0);
    ss = {0, static_cast<int32_t>(pos.size())};
    b.positions = Tensor(pos.data(), DType::I32, {static_cast<int64_t>(pos.size())});
    b.seq_index = Tensor(si.data(), DType::I32, {static_cast<int64_t>(si.size())});
    b.seq_start = Tensor(ss.data(), DType::I32, {2});
    b.block_tables = Tensor(table.data(), DType::I32, {1, static_cast<int64_t>(table.size())});
    return b;
  }
};

Batch range(int32_t lo, int32_t hi, const std::vector<int32_t>& table) {
  Batch b;
  for (int32_t p = lo; p < hi; ++p) b.pos.push_back(p);
  b.table = table;
  return b;
}

TEST(CompressedKvQuantized, CompressorStoresWholeHeadsAndPoolsTheDequantizedValues) {
  CpuOps ops(2);
  const int rate = 4, hd = 8, L = 14, page = 4, n_pages = 8, dv = 8;
  const std::vector<int32_t> table = {5, 2, 7, 0};
  const std::vector<float> inv = {1.0f, 0.1f};
  for (const DType kvd : {DType::F8_E4M3, DType::Q8_0})
    for (const bool overlap : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(kvd)) + (overlap ? " CSA" : " HCA"));
      const int width = overlap ? 2 * hd : hd, col = 2 * dv, Wv = col + 2 * width + dv;  // a neighbour on each side
      const int M = L / rate;
      CompressParams p;
      p.rate = rate, p.head_dim = hd, p.overlap = overlap, p.col = col;
      p.rope.head_dim = hd, p.rope.n_rot = 4;
      p.rope.inv_freq = Tensor(const_cast<float*>(inv.data()), DType::F32, {2});
      std::vector<float> proj = random_floats(static_cast<size_t>(L * 2 * width), 7, -2.0f, 2.0f);
      std::vector<float> ape = random_floats(static_cast<size_t>(rate * width), 8), nw = random_floats(hd, 9, 0.5f, 1.5f);
      const Tensor ape_t(ape.data(), DType::F32, {rate, width}), nw_t(nw.data(), DType::F32, {hd});
      // Pages of random bytes (the neighbours' codes and scales; kept finite where they are read).
      QPages one(kvd, n_pages, page, Wv / dv, dv), chunks = one;
      std::mt19937 rng(3);
      for (uint8_t& c : one.codes) c = static_cast<uint8_t>(rng() % 0x70);
      for (uint8_t& c : one.scales) c = static_cast<uint8_t>(rng() % 0x30);
      chunks.codes = one.codes, chunks.scales = one.scales;
      const QPages before = one;
      std::vector<float> e1(static_cast<size_t>(M * hd)), e2 = e1;
      auto run = [&](QPages& q, int lo, int hi, std::vector<float>& e) {
        Batch b = range(lo, hi, table);
        ops.compress_kv(p, b.info(), Tensor(proj.data() + lo * 2 * width, DType::F32, {hi - lo, 2 * width}),
                        KvLayer{Tensor(), q.code_tensor(), Tensor(), q.scale_tensor()}, ape_t, nw_t,
                        Tensor(e.data(), DType::F32, {1, M, hd}));
      };
      run(one, 0, L, e1);
      run(chunks, 0, 5, e2), run(chunks, 5, 11, e2), run(chunks, 11, 12, e2), run(chunks, 12, L, e2);
      EXPECT_EQ(one.codes, chunks.codes);
      EXPECT_EQ(one.scales, chunks.scales);
      EXPECT_EQ(std::memcmp(e1.data(), e2.data(), e1.size() * 4), 0) << "chunked prefill vs one prefill";
      // Each written slot: the compressor's heads quantized alone (kv_quantize_head of its columns), the
      // neighbours' heads untouched; slots never written untouched.
      const int64_t heads = Wv / dv;
      std::vector<uint8_t> codes(dv), scales(static_cast<size_t>(one.sph * one.sbytes));
      std::vector<bool> written(static_cast<size_t>(n_pages * page), false);
      for (int t = 0; t < L; ++t) {
        const int64_t slot = int64_t{table[t / page]} * page + t % page;
        written[static_cast<size_t>(slot)] = true;
        for (int64_t h = 0; h < heads; ++h) {
          const int64_t row = slot * heads + h;
          const uint8_t* c = one.codes.data() + row * dv;
          const uint8_t* s = one.scales.data() + row * one.sph * one.sbytes;
          if (h >= col / dv && h < (col + 2 * width) / dv) {
            kv_quantize_head(kvd, proj.data() + t * 2 * width + (h * dv - col), dv, codes.data(), scales.data());
            EXPECT_EQ(std::memcmp(c, codes.data(), dv), 0) << "token " << t << " head " << h;
            EXPECT_EQ(std::memcmp(s, scales.data(), scales.size()), 0) << "token " << t << " head " << h;
          } else {
            EXPECT_EQ(std::memcmp(c, before.codes.data() + row * dv, dv), 0) << "neighbour head " << h;
            EXPECT_EQ(std::memcmp(s, before.scales.data() + row * one.sph * one.sbytes, scales.size()), 0);
          }
        }
      }
      for (int64_t slot = 0; slot < n_pages * page; ++slot)
        if (!written[static_cast<size_t>(slot)]) {
          EXPECT_EQ(std::memcmp(one.codes.data() + slot * Wv, before.codes.data() + slot * Wv, Wv), 0) << slot;
        }
      // The same op over F32 pages (one head of Wv) fed the dequantized columns: the same entries.
      const std::vector<float> deq = one.dequantized();
      std::vector<float> dproj(proj.size()), f32_pages(static_cast<size_t>(n_pages * page * Wv)), e3 = e1;
      for (int t = 0; t < L; ++t) {
        const int64_t slot = int64_t{table[t / page]} * page + t % page;
        std::copy_n(deq.data() + slot * Wv + col, 2 * width, dproj.data() + t * 2 * width);
      }
      Batch b = range(0, L, table);
      ops.compress_kv(p, b.info(), Tensor(dproj.data(), DType::F32, {L, 2 * width}),
                      KvLayer{Tensor(), Tensor(f32_pages.data(), DType::F32, {n_pages, page, 1, Wv}), Tensor(), Tensor()}, ape_t, nw_t,
                      Tensor(e3.data(), DType::F32, {1, M, hd}));
      EXPECT_EQ(std::memcmp(e1.data(), e3.data(), e1.size() * 4), 0) << "quantized vs F32 pages of the same values";
      // Columns that split a head are refused: storing them would re-scale a neighbour's values.
      CompressParams bad = p;
      bad.col = col + 1;
      try {
        run(one, 0, L, e1);  // (valid again)
        ops.compress_kv(bad, b.info(), Tensor(proj.data(), DType::F32, {L, 2 * width}),
                        KvLayer{Tensor(), one.code_tensor(), Tensor(), one.scale_tensor()}, ape_t, nw_t,
                        Tensor(e1.data(), DType::F32, {1, M, hd}));
        ADD_FAILURE() << "columns from " << bad.col << " accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("are not whole heads of 8"), std::string::npos) << e.what();
      }
    }
}

TEST(CompressedKvQuantized, CompressedAttentionReadsTheDequantizedKeys) {
  CpuOps ops(2);
  const int nh = 2, hd = 40, window = 5, rate = 2, page = 4, L = 11, M = 5, n_pages = 4;  // q8_0: a short last block
  const std::vector<int32_t> table = {3, 1, 0};
  const std::vector<float> inv = {0.7f, 0.2f};
  std::vector<float> kvs = random_floats(static_cast<size_t>(L * hd), 30, -3.0f, 3.0f);
  std::vector<float> ent = random_floats(static_cast<size_t>(M * hd), 32), sinks = {0.3f, -1.0f};
  CompressedAttentionParams p;
  p.n_head = nh, p.head_dim = hd, p.scale = 0.3f, p.window = window, p.rate = rate;
  p.rope.head_dim = hd, p.rope.n_rot = 4, p.rope.inv_freq = Tensor(const_cast<float*>(inv.data()), DType::F32, {2});
  p.sinks = Tensor(sinks.data(), DType::F32, {nh});
  for (const DType kvd : {DType::F8_E4M3, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(kvd));
    QPages q(kvd, n_pages, page, 1, hd);
    Batch wb = range(0, L, table);
    // The model's write: K = V in the key pages (codes and scales written twice, identically).
    const KvLayer quant{q.code_tensor(), q.code_tensor(), q.scale_tensor(), q.scale_tensor()};
    ops.kv_write(wb.info(), Tensor(kvs.data(), DType::F32, {L, hd}), Tensor(kvs.data(), DType::F32, {L, hd}), quant);
    std::vector<float> deq = q.dequantized();
    const KvLayer f32{Tensor(deq.data(), DType::F32, {n_pages, page, 1, hd}), Tensor(), Tensor(), Tensor()};
    Batch b;
    b.pos = {6, 9, 10}, b.table = table;
    std::vector<float> qv = random_floats(static_cast<size_t>(3 * nh * hd), 31, -2.0f, 2.0f);
    std::vector<int32_t> sel = {1, -1, 3, 0, 4, 2};
    for (const bool selected : {false, true}) {
      std::vector<float> want(static_cast<size_t>(3 * nh * hd)), got = want;
      const Tensor e(ent.data(), DType::F32, {1, M, hd}), s = selected ? Tensor(sel.data(), DType::I32, {3, 2}) : Tensor();
      ops.attention_compressed(p, b.info(), Tensor(qv.data(), DType::F32, {3, nh * hd}), f32, e, s,
                               Tensor(want.data(), DType::F32, {3, nh * hd}));
      ops.attention_compressed(p, b.info(), Tensor(qv.data(), DType::F32, {3, nh * hd}),
                               KvLayer{quant.k, Tensor(), quant.k_scale, Tensor()}, e, s,
                               Tensor(got.data(), DType::F32, {3, nh * hd}));
      EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0) << (selected ? "selected" : "all entries");
    }
  }
}

TEST(CompressedKvQuantized, SparseAttentionReadsValuesAcrossNarrowHeads) {
  CpuOps ops(2);
  const int H = 4, G = 2, D = 16, dv = 8, block = 4, page = 8, n_pages = 4, L = 27, K = 2;
  const int Wv = G * D + 2 * dv;  // values, then the indexer's columns, in heads of 8
  const std::vector<int32_t> table = {2, 0, 3, 1};
  std::vector<float> k = random_floats(static_cast<size_t>(L * G * D), 40, -3.0f, 3.0f);
  std::vector<float> v = random_floats(static_cast<size_t>(L * Wv), 41);
  Batch b;
  b.pos = {22, 26}, b.table = table;
  std::vector<int32_t> sel = {1, 4, 0, -1};
  std::vector<float> q = random_floats(static_cast<size_t>(2 * H * D), 42, -2.0f, 2.0f);
  AttentionParams ap;
  ap.n_head = H, ap.n_head_kv = G, ap.head_dim = D, ap.scale = 0.25f;
  // F32 pages: value rows as one head of Wv or Wv / 8 heads of 8 read the same.
  std::vector<float> kf(static_cast<size_t>(n_pages * page * G * D)), vf(static_cast<size_t>(n_pages * page * Wv));
  Batch wb = range(0, L, table);
  ops.kv_write(wb.info(), Tensor(k.data(), DType::F32, {L, G * D}), Tensor(v.data(), DType::F32, {L, Wv}),
               KvLayer{Tensor(kf.data(), DType::F32, {n_pages, page, G, D}),
                       Tensor(vf.data(), DType::F32, {n_pages, page, Wv / dv, dv}), Tensor(), Tensor()});
  std::vector<float> wide(static_cast<size_t>(2 * H * D)), narrow = wide;
  ops.attention_qsa(ap, block, b.info(), Tensor(q.data(), DType::F32, {2, H * D}),
                    KvLayer{Tensor(kf.data(), DType::F32, {n_pages, page, G, D}),
                            Tensor(vf.data(), DType::F32, {n_pages, page, 1, Wv}), Tensor(), Tensor()},
                    Tensor(sel.data(), DType::I32, {2, K}), Tensor(wide.data(), DType::F32, {2, H * D}));
  ops.attention_qsa(ap, block, b.info(), Tensor(q.data(), DType::F32, {2, H * D}),
                    KvLayer{Tensor(kf.data(), DType::F32, {n_pages, page, G, D}),
                            Tensor(vf.data(), DType::F32, {n_pages, page, Wv / dv, dv}), Tensor(), Tensor()},
                    Tensor(sel.data(), DType::I32, {2, K}), Tensor(narrow.data(), DType::F32, {2, H * D}));
  EXPECT_EQ(std::memcmp(wide.data(), narrow.data(), wide.size() * 4), 0);
  for (const DType kvd : {DType::F8_E4M3, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(kvd));
    QPages qk(kvd, n_pages, page, G, D), qv(kvd, n_pages, page, Wv / dv, dv);
    const KvLayer quant{qk.code_tensor(), qv.code_tensor(), qk.scale_tensor(), qv.scale_tensor()};
    ops.kv_write(wb.info(), Tensor(k.data(), DType::F32, {L, G * D}), Tensor(v.data(), DType::F32, {L, Wv}), quant);
    std::vector<float> dk = qk.dequantized(), dvals = qv.dequantized();
    std::vector<float> want(static_cast<size_t>(2 * H * D)), got = want;
    ops.attention_qsa(ap, block, b.info(), Tensor(q.data(), DType::F32, {2, H * D}),
                      KvLayer{Tensor(dk.data(), DType::F32, {n_pages, page, G, D}),
                              Tensor(dvals.data(), DType::F32, {n_pages, page, 1, Wv}), Tensor(), Tensor()},
                      Tensor(sel.data(), DType::I32, {2, K}), Tensor(want.data(), DType::F32, {2, H * D}));
    ops.attention_qsa(ap, block, b.info(), Tensor(q.data(), DType::F32, {2, H * D}), quant,
                      Tensor(sel.data(), DType::I32, {2, K}), Tensor(got.data(), DType::F32, {2, H * D}));
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size() * 4), 0);
    EXPECT_NE(std::memcmp(got.data(), wide.data(), wide.size() * 4), 0);  // quantized: not the F32 values' output
  }
}

}  // namespace
}  // namespace ft::testing
