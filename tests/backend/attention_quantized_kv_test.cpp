// CPU attention over quantized KV pages (--kv-cache-dtype fp8 / q8_0): an item takes several query
// heads of one KV head, so each page row is dequantized once for them (backend/cpu/attention.cpp), yet
// every output equals, bit for bit, attention over F32 pages that hold the same dequantized values
// (one head an item), whatever the thread count (which sets how many heads an item takes): a prefill
// chunk, a continued chunk and decode tokens, GQA groups of 8, with and without a sliding window and
// sinks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "quant/kv_quant.h"
#include "tensor/dtype.h"
#include "test_util.h"

namespace ft::testing {
namespace {

TEST(CpuAttentionQuantizedKv, EqualsF32PagesOfTheDequantizedValuesBitForBit) {
  const int64_t H = 16, G = 2, D = 64, page = 16, n_pages = 16, max_blocks = 8;
  struct Seq {
    int32_t start, n_new;
  };
  const std::vector<Seq> seqs = {{0, 37}, {40, 5}, {90, 1}, {17, 1}};
  const auto S = static_cast<int32_t>(seqs.size());
  // Disjoint pages in a shuffled order; a sequence's unused table entries stay 0 (never read).
  std::vector<int32_t> order(static_cast<size_t>(n_pages)), table(static_cast<size_t>(S * max_blocks), 0);
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), std::mt19937(5));
  size_t next = 0;
  for (int32_t s = 0; s < S; ++s)
    for (int64_t b = 0; b * page < seqs[static_cast<size_t>(s)].start + seqs[static_cast<size_t>(s)].n_new; ++b)
      table[static_cast<size_t>(s * max_blocks + b)] = order[next++];
  for (const DType kvd : {DType::F8_E4M3, DType::Q8_0}) {
    SCOPED_TRACE(dtype_name(kvd));
    const int64_t sph = kv_scales_per_head(kvd, D), sbytes = kv_scale_dtype(kvd) == DType::F32 ? 4 : 2;
    const int64_t rows = n_pages * page * G;
    std::vector<uint8_t> kc(static_cast<size_t>(rows * D)), vc = kc, ks(static_cast<size_t>(rows * sph * sbytes)), vs = ks;
    KvLayer quant{Tensor(kc.data(), kv_code_dtype(kvd), {n_pages, page, G, D}),
                  Tensor(vc.data(), kv_code_dtype(kvd), {n_pages, page, G, D}),
                  Tensor(ks.data(), kv_scale_dtype(kvd), {n_pages, page, G, sph}),
                  Tensor(vs.data(), kv_scale_dtype(kvd), {n_pages, page, G, sph})};
    CpuOps one(1), many(64);  // 8 heads an item, then 2 (4 items a thread)
    // Every position of every sequence written (quantized) in one batch.
    std::vector<int32_t> pos, si, st{0};
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t p = 0; p < seqs[static_cast<size_t>(s)].start + seqs[static_cast<size_t>(s)].n_new; ++p)
        pos.push_back(p), si.push_back(s);
      st.push_back(static_cast<int32_t>(pos.size()));
    }
    auto batch = [&](std::vector<int32_t>& p, std::vector<int32_t>& q, std::vector<int32_t>& start) {
      BatchInfo b;
      b.n_tokens = static_cast<int32_t>(p.size()), b.n_seqs = S, b.max_blocks = static_cast<int32_t>(max_blocks);
      for (int32_t x : p) b.max_kv_len = std::max(b.max_kv_len, x + 1);
      b.positions = Tensor(p.data(), DType::I32, {static_cast<int64_t>(p.size())});
      b.seq_index = Tensor(q.data(), DType::I32, {static_cast<int64_t>(q.size())});
      b.seq_start = Tensor(start.data(), DType::I32, {S + 1});
      b.block_tables = Tensor(table.data(), DType::I32, {S, max_blocks});
      return b;
    };
    const auto T_all = static_cast<int64_t>(pos.size());
    std::vector<float> k = random_floats(static_cast<size_t>(T_all * G * D), 1, -3.0f, 3.0f);
    std::vector<float> v = random_floats(k.size(), 2);
    one.kv_write(batch(pos, si, st), Tensor(k.data(), DType::F32, {T_all, G * D}), Tensor(v.data(), DType::F32, {T_all, G * D}),
                 quant);
    // The same values in F32 pages.
    std::vector<float> kf(static_cast<size_t>(rows * D)), vf = kf;
    for (int64_t r = 0; r < rows; ++r) {
      kv_dequantize_head(kvd, kc.data() + r * D, ks.data() + r * sph * sbytes, D, kf.data() + r * D);
      kv_dequantize_head(kvd, vc.data() + r * D, vs.data() + r * sph * sbytes, D, vf.data() + r * D);
    }
    KvLayer f32{Tensor(kf.data(), DType::F32, {n_pages, page, G, D}), Tensor(vf.data(), DType::F32, {n_pages, page, G, D})};
    // This step's tokens: each sequence's new positions.
    std::vector<int32_t> sp, ss, sst{0};
    for (int32_t s = 0; s < S; ++s) {
      for (int32_t p = seqs[static_cast<size_t>(s)].start; p < seqs[static_cast<size_t>(s)].start + seqs[static_cast<size_t>(s)].n_new; ++p)
        sp.push_back(p), ss.push_back(s);
      sst.push_back(static_cast<int32_t>(sp.size()));
    }
    const auto T = static_cast<int64_t>(sp.size());
    std::vector<float> q = random_floats(static_cast<size_t>(T * H * D), 3, -2.0f, 2.0f);
    std::vector<float> sinks = random_floats(static_cast<size_t>(H), 4, -1.0f, 2.0f);
    for (const int32_t window : {0, 24})
      for (const bool with_sinks : {false, true}) {
        SCOPED_TRACE("window " + std::to_string(window) + (with_sinks ? " sinks" : ""));
        AttentionParams ap{static_cast<int32_t>(H), static_cast<int32_t>(G), static_cast<int32_t>(D),
                           1.0f / 8.0f, window};
        if (with_sinks) ap.sinks = Tensor(sinks.data(), DType::F32, {H});
        std::vector<float> want(static_cast<size_t>(T * H * D)), got1 = want, got8 = want;
        const BatchInfo b = batch(sp, ss, sst);
        one.attention(ap, b, Tensor(q.data(), DType::F32, {T, H * D}), f32, Tensor(want.data(), DType::F32, {T, H * D}));
        one.attention(ap, b, Tensor(q.data(), DType::F32, {T, H * D}), quant, Tensor(got1.data(), DType::F32, {T, H * D}));
        many.attention(ap, b, Tensor(q.data(), DType::F32, {T, H * D}), quant, Tensor(got8.data(), DType::F32, {T, H * D}));
        EXPECT_EQ(std::memcmp(got1.data(), want.data(), want.size() * 4), 0) << "1 thread (8 heads an item)";
        EXPECT_EQ(std::memcmp(got8.data(), want.data(), want.size() * 4), 0) << "64 threads (2 heads an item)";
      }
  }
}

}  // namespace
}  // namespace ft::testing
