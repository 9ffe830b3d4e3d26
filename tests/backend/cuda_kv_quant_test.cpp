// CUDA vs CPU over quantized KV pages (--kv-cache-dtype fp8 / q8_0, issue 39; quant/kv_quant.h):
//  - kv_write's codes and scales equal the CPU's bit for bit, from F32 and BF16 inputs, on rows made
//    to hit the quantizers' corners: zero rows (scale 1 / d 0), exact ties (E4M3 ties to the even code,
//    Q8_0's round half away from zero), E4M3 subnormal codes, values that saturate at 448, a head of 80
//    (Q8_0's short last block) and heads of 64 to 512;
//  - attention over the pages (the decode kernel in its split-K, cluster and 4-heads-a-block forms, the
//    general kernel for prefill, chunked and mixed batches, the tensor-core kernel for batches of 256
//    tokens or more; sliding windows, sinks; head dims 64 / 80 / 128 / 256 / 512, GQA groups 1 to 16)
//    matches the CPU op over its own pages. Both sides use F32 activations and read the same
//    dequantized values (equal codes and scales, the same value * scale products), so only the order
//    of fp32 sums and __expf differ: 1e-4 relative L2, as the F32 fused-decode case of
//    cuda_attention_test.cpp; the tensor-core kernel rounds Q, K, V and P to bf16: kTol, as for its
//    float pages (cuda_attention_test.cpp);
//  - qk_norm_rope_attention over quantized pages (unfused on CUDA: norm_rope, the quantizing kv_write,
//    attention) within 1e-3 (the norm's rsqrt may move a value across a code boundary);
//  - attention_mla (multi-head latent attention) over quantized latent [.., 1, R] and RoPE-key
//    [.., 1, P] pages written by kv_write on each side (codes and scales byte-equal): decode batches
//    (split over each token's keys) and prefill batches of two sequences, the fixture's shape (R 32,
//    P 8: q8_0's short block) to DeepSeek-V3's (128 heads, R 512, P 64) and batches of 256 tokens or
//    more (quantized pages take the CUDA-core kernel whatever the batch): 1e-4, as both sides read
//    the same code * scale values with F32 activations; the tensor-core kernel when the tuning asks
//    for it (values rounded to bf16): kTol.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <tuple>

#include "backend/op_harness.h"
#include "quant/kv_quant.h"
#include "util/error.h"

#ifdef FT_HAVE_CUDA
#include "backend/cuda/attention_mla.h"
#endif

namespace ft::testing {
namespace {

struct SeqSpec {
  int32_t history;  // tokens already in the cache
  int32_t n_new;    // tokens of this forward
};

struct MlaQConfig {
  std::string name;
  int64_t H, R, P, page;
  std::vector<SeqSpec> seqs;
  int tc = -1, n_split = 0;  // cuda::MlaTuning overrides (-1, 0: the entry's plan)
};

struct QConfig {
  std::string name;
  int64_t H, G, D, page;
  int32_t window;
  std::vector<SeqSpec> seqs;
  bool sinks = false;
};

constexpr double kQuantAttnTol = 1e-4;

class CudaKvQuant : public GpuBatchTest {
 protected:
  /** Quantized pages of one layer on both sides: the CPU's codes and scales in host vectors, the
   *  GPU's in device tensors, all zero to start with (so whole buffers compare byte for byte). */
  struct QPages {
    DType kv = DType::F8_E4M3;  // F8_E4M3 or Q8_0
    int64_t n_pages = 0, page = 0, G = 0, D = 0, sph = 0;
    int64_t Dv = 0, sphv = 0;  // v pages' head width and scales a head (D, sph unless given: MLA's RoPE key)
    std::vector<uint8_t> kc, vc, ks, vs;
    KvLayer cpu, gpu;
  };

  /** Dv: the v pages' head width (0: D; MLA's [.., 1, R] latent and [.., 1, P] RoPE-key pages differ). */
  void make_pages(QPages& p, DType kv, int64_t n_pages, int64_t page, int64_t G, int64_t D, int64_t Dv = 0) {
    p.kv = kv, p.n_pages = n_pages, p.page = page, p.G = G, p.D = D, p.Dv = Dv > 0 ? Dv : D;
    p.sph = kv_scales_per_head(kv, D), p.sphv = kv_scales_per_head(kv, p.Dv);
    const DType code = kv_code_dtype(kv), scale = kv_scale_dtype(kv);
    const size_t scale_bytes = scale == DType::F32 ? 4 : 2;
    p.kc.assign(static_cast<size_t>(n_pages * page * G * D), 0);
    p.vc.assign(static_cast<size_t>(n_pages * page * G * p.Dv), 0);
    p.ks.assign(static_cast<size_t>(n_pages * page * G * p.sph) * scale_bytes, 0);
    p.vs.assign(static_cast<size_t>(n_pages * page * G * p.sphv) * scale_bytes, 0);
    p.cpu = KvLayer{Tensor(p.kc.data(), code, {n_pages, page, G, D}), Tensor(p.vc.data(), code, {n_pages, page, G, p.Dv}),
                    Tensor(p.ks.data(), scale, {n_pages, page, G, p.sph}),
                    Tensor(p.vs.data(), scale, {n_pages, page, G, p.sphv})};
    p.gpu = KvLayer{arena().dev_bytes(p.kc, code, {n_pages, page, G, D}),
                    arena().dev_bytes(p.vc, code, {n_pages, page, G, p.Dv}),
                    arena().dev_bytes(p.ks, scale, {n_pages, page, G, p.sph}),
                    arena().dev_bytes(p.vs, scale, {n_pages, page, G, p.sphv})};
  }

  std::vector<uint8_t> read_bytes(const Tensor& d) {
    std::vector<uint8_t> out(static_cast<size_t>(d.bytes()));
    gpu().copy(d, Tensor(out.data(), d.dtype, d.shape.data(), d.ndim));
    gpu().synchronize();
    return out;
  }

  /** Bytes of the GPU's pages and scales that differ from the CPU's (0: bit for bit). */
  size_t page_mismatches(const QPages& p, const std::string& what) {
    size_t bad = 0;
    for (const auto& [dev, host, name] :
         {std::tuple<const Tensor*, const std::vector<uint8_t>*, const char*>{&p.gpu.k, &p.kc, "k codes"},
          {&p.gpu.v, &p.vc, "v codes"}, {&p.gpu.k_scale, &p.ks, "k scales"}, {&p.gpu.v_scale, &p.vs, "v scales"}}) {
      const std::vector<uint8_t> got = read_bytes(*dev);
      EXPECT_EQ(got.size(), host->size());
      size_t n = 0, first = 0;
      for (size_t i = 0; i < std::min(got.size(), host->size()); ++i)
        if (got[i] != (*host)[i]) first = n++ == 0 ? i : first;
      EXPECT_EQ(n, 0u) << what << ": " << name << " differ at " << n << " bytes, first at byte " << first << " (gpu "
                       << (n ? int(got[first]) : 0) << ", cpu " << (n ? int((*host)[first]) : 0) << ")";
      bad += n;
    }
    return bad;
  }

  /** The block tables of config c (a random permutation of the pool, 3 pages spare) and each
   *  sequence's history and new runs. */
  struct Plan {
    int32_t max_blocks = 0;
    int64_t n_pages = 0;
    std::vector<int32_t> table;
    std::vector<std::pair<int32_t, int32_t>> hist, now;
  };
  static Plan plan(const std::vector<SeqSpec>& seqs, int64_t page, uint32_t seed) {
    Plan p;
    const int64_t S = static_cast<int64_t>(seqs.size());
    int32_t max_len = 0;
    for (const SeqSpec& s : seqs) max_len = std::max(max_len, s.history + s.n_new);
    p.max_blocks = static_cast<int32_t>((max_len + page - 1) / page);
    p.n_pages = S * p.max_blocks + 3;
    std::vector<int32_t> perm(static_cast<size_t>(p.n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    p.table.assign(perm.begin(), perm.begin() + S * p.max_blocks);
    for (const SeqSpec& s : seqs) p.hist.push_back({0, s.history}), p.now.push_back({s.history, s.n_new});
    return p;
  }

  /** kv_write of k [T, G * D] and v [T, G * Dv] (floats) on both sides; src: the GPU input's dtype
   *  (F32 or BF16; the values must be exact in it). */
  void write_both(const HostBatch& hb, const Plan& pl, QPages& pg, const std::vector<float>& k,
                  const std::vector<float>& v, DType src) {
    const int64_t W = pg.G * pg.D, Wv = pg.G * pg.Dv;
    cpu().kv_write(info(hb, pl.table, pl.max_blocks, false), arena().host_f32(k, {hb.T, W}),
                   arena().host_f32(v, {hb.T, Wv}), pg.cpu);
    gpu().kv_write(info(hb, pl.table, pl.max_blocks, true), arena().dev_from(k, src, {hb.T, W}),
                   arena().dev_from(v, src, {hb.T, Wv}), pg.gpu);
  }

  /** Rows of n values (n a multiple of D) that hit the quantizers' corners, one kind a head row by
   *  (row index % 6): zeros (with -0), E4M3 ties at scale 1 (amax 448; midpoints of codes in several
   *  binades and of subnormal codes), Q8_0 ties at d = 1 (127 in each block of 32, then k + 0.5),
   *  large values (scales far above 1), tiny values (scales far below 1, E4M3 subnormal codes), and
   *  random values over 6 decades. Every value is exact in bf16. */
  static std::vector<float> corner_rows(int64_t rows, int64_t D, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-4.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(rows * D));
    for (int64_t r = 0; r < rows; ++r) {
      float* row = x.data() + r * D;
      for (int64_t i = 0; i < D; ++i) {
        const float sign = (i & 1) ? -1.0f : 1.0f;
        switch (r % 6) {
          case 0: row[i] = (i % 3 == 0) ? -0.0f : 0.0f; break;
          case 1:
            if (i == 0) row[i] = 448.0f;
            else if (i % 5 == 0) row[i] = sign * (static_cast<float>(i % 7) + 0.5f) * 0x1p-9f;  // subnormal midpoints
            else row[i] = sign * (1.0f + static_cast<float>(2 * (i % 8) + 1) / 16.0f) * std::ldexp(1.0f, static_cast<int>((i / 8) % 12) - 6);
            break;
          case 2: row[i] = i % 32 == 0 ? 127.0f : sign * (static_cast<float>(i % 50) + 0.5f); break;
          case 3: row[i] = bf16_to_f32(f32_to_bf16(u(rng) * 3.0e4f)); break;
          case 4: row[i] = bf16_to_f32(f32_to_bf16(u(rng) * 1.0e-6f)); break;
          default: row[i] = bf16_to_f32(f32_to_bf16(u(rng) * std::pow(10.0f, e(rng)))); break;
        }
      }
    }
    return x;
  }

  void run_attention(const QConfig& c, DType kv, uint32_t seed) {
    const std::string name = c.name + (kv == DType::F8_E4M3 ? " fp8" : " q8_0");
    SCOPED_TRACE(name);
    const int64_t W = c.G * c.D;
    const Plan pl = plan(c.seqs, c.page, seed);
    QPages pg;
    make_pages(pg, kv, pl.n_pages, c.page, c.G, c.D);
    uint32_t sd = seed * 7;
    for (const auto& runs : {pl.hist, pl.now}) {
      const HostBatch hb = make(runs);
      if (hb.T == 0) continue;
      const auto k = rand_bf16(static_cast<size_t>(hb.T * W), sd++, -2.0f, 2.0f), v = rand_bf16(k.size(), sd++);
      write_both(hb, pl, pg, k, v, DType::BF16);
    }
    EXPECT_EQ(page_mismatches(pg, name), 0u);

    const HostBatch hb = make(pl.now);
    const int64_t T = hb.T, HD = c.H * c.D;
    const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++, -2.0f, 2.0f);
    AttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.n_head_kv = static_cast<int32_t>(c.G);
    p.head_dim = static_cast<int32_t>(c.D), p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    p.sliding_window = c.window;
    std::vector<float> sinks;
    if (c.sinks) {
      sinks = rand_bf16(static_cast<size_t>(c.H), sd++, -1.0f, 3.0f);
      p.sinks = arena().host_f32(sinks, {c.H});
    }
    std::vector<float> ref(static_cast<size_t>(T * HD));
    cpu().attention(p, info(hb, pl.table, pl.max_blocks, false), arena().host_f32(q, {T, HD}), pg.cpu,
                    Tensor(ref.data(), DType::F32, {T, HD}));
    if (c.sinks) p.sinks = arena().dev_from(sinks, DType::F32, {c.H});
    Tensor out = arena().dev_poisoned(DType::F32, {T, HD});
    gpu().attention(p, info(hb, pl.table, pl.max_blocks, true), arena().dev_from(q, DType::F32, {T, HD}), pg.gpu, out);
    const double e = compare(out, ref);
    report("attention quantized KV", name, e);
    const bool tensor_cores = T >= 256 && T != hb.S && (c.D == 64 || c.D == 96 || c.D == 128 || c.D == 256);
    EXPECT_LE(e, tensor_cores ? kTol : kQuantAttnTol) << name;
  }

  /** attention_mla over quantized latent pages [n_pages, page, 1, R] (kv.k) and RoPE-key pages
   *  [n_pages, page, 1, P] (kv.v): kv_write of the history then this batch's rows on both sides
   *  (codes and scales byte-equal), then the op with F32 q_lat / q_rope / out on both (1e-4). */
  void run_mla(const MlaQConfig& c, DType kv, uint32_t seed) {
    const std::string name = c.name + (kv == DType::F8_E4M3 ? " fp8" : " q8_0");
    SCOPED_TRACE(name);
    const Plan pl = plan(c.seqs, c.page, seed);
    QPages pg;
    make_pages(pg, kv, pl.n_pages, c.page, 1, c.R, c.P);
    uint32_t sd = seed * 13;
    for (const auto& runs : {pl.hist, pl.now}) {
      const HostBatch hb = make(runs);
      if (hb.T == 0) continue;
      const auto lat = rand_bf16(static_cast<size_t>(hb.T * c.R), sd++, -2.0f, 2.0f);
      const auto rope = rand_bf16(static_cast<size_t>(hb.T * c.P), sd++, -2.0f, 2.0f);
      write_both(hb, pl, pg, lat, rope, DType::BF16);
    }
    EXPECT_EQ(page_mismatches(pg, name), 0u);

    const HostBatch hb = make(pl.now);
    const int64_t T = hb.T, HR = c.H * c.R, HP = c.H * c.P;
    const auto ql = rand_bf16(static_cast<size_t>(T * HR), sd++, -2.0f, 2.0f);
    const auto qr = rand_bf16(static_cast<size_t>(T * HP), sd++, -2.0f, 2.0f);
    MlaAttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.kv_lora_rank = static_cast<int32_t>(c.R);
    p.rope_dim = static_cast<int32_t>(c.P), p.scale = 1.0f / std::sqrt(static_cast<float>(c.R / 4 + c.P));
    std::vector<float> ref(static_cast<size_t>(T * HR));
    cpu().attention_mla(p, info(hb, pl.table, pl.max_blocks, false), arena().host_f32(ql, {T, HR}),
                        arena().host_f32(qr, {T, HP}), pg.cpu, Tensor(ref.data(), DType::F32, {T, HR}));
    Tensor out = arena().dev_poisoned(DType::F32, {T, HR});
    const Tensor dql = arena().dev_from(ql, DType::F32, {T, HR}), dqr = arena().dev_from(qr, DType::F32, {T, HP});
#ifdef FT_HAVE_CUDA
    cuda::mla_tuning() = cuda::MlaTuning{c.tc, 0, c.n_split};
#endif
    gpu().attention_mla(p, info(hb, pl.table, pl.max_blocks, true), dql, dqr, pg.gpu, out);
#ifdef FT_HAVE_CUDA
    cuda::mla_tuning() = cuda::MlaTuning{};
#endif
    const double e = compare(out, ref);
    report("attention_mla quantized KV", name, e);
    EXPECT_LE(e, c.tc == 1 ? kTol : kQuantAttnTol) << name;
  }
};

TEST_F(CudaKvQuant, KvWriteCodesAndScalesEqualCpu) {
  struct Shape {
    int64_t G, D;
  };
  const std::vector<Shape> shapes = {{2, 64}, {1, 80}, {4, 128}, {2, 256}, {1, 512}, {3, 16}};
  uint32_t seed = 39;
  for (const DType kv : {DType::F8_E4M3, DType::Q8_0}) {
    for (const Shape& s : shapes) {
      for (const DType src : {DType::F32, DType::BF16}) {
        const std::string what = std::string(kv == DType::F8_E4M3 ? "fp8" : "q8_0") + " G" + std::to_string(s.G) +
                                 " D" + std::to_string(s.D) + (src == DType::F32 ? " from f32" : " from bf16");
        SCOPED_TRACE(what);
        // two sequences over 16-slot pages, written as a prefill then a chunk and a decode token
        const Plan pl = plan({{37, 3}, {5, 1}}, 16, seed);
        QPages pg;
        make_pages(pg, kv, pl.n_pages, 16, s.G, s.D);
        for (const auto& runs : {pl.hist, pl.now}) {
          const HostBatch hb = make(runs);
          const int64_t rows = hb.T * s.G;
          write_both(hb, pl, pg, corner_rows(rows, s.D, seed * 3 + 1), corner_rows(rows, s.D, seed * 3 + 2), src);
          ++seed;
        }
        EXPECT_EQ(page_mismatches(pg, what), 0u);
      }
    }
  }
}

TEST_F(CudaKvQuant, AttentionMatchesCpu) {
  const std::vector<QConfig> configs = {
      // one token per sequence: the decode kernel (attention_decode.cu)
      {"decode 4 seqs hd64 gqa2 (split-K)", 4, 2, 64, 16, 0, {{300, 1}, {1000, 1}, {50, 1}, {129, 1}}},
      {"decode 2 seqs hd128 gqa4 (cluster on Hopper)", 8, 2, 128, 64, 0, {{1899, 1}, {39, 1}}},
      {"decode hd128 gqa8 5000 keys (global merge)", 16, 2, 128, 64, 0, {{5000, 1}, {64, 1}}},
      {"decode hd128 gqa8 9 seqs (4 heads a block)", 16, 2, 128, 32, 0,
       {{300, 1}, {10, 1}, {50, 1}, {129, 1}, {1, 1}, {77, 1}, {200, 1}, {5, 1}, {400, 1}}},
      {"decode mha hd256 page32", 4, 4, 256, 32, 0, {{700, 1}, {0, 1}}},
      {"decode hd80 (q8_0 short block) gqa1", 3, 3, 80, 16, 0, {{90, 1}, {3, 1}}},
      {"decode hd512 gqa2", 4, 2, 512, 32, 0, {{600, 1}, {17, 1}}},
      {"decode sliding window 64, 3 seqs hd64", 4, 2, 64, 16, 64, {{200, 1}, {30, 1}, {1000, 1}}},
      {"decode gpt-oss-like hd64 gqa8 window 128 sinks", 16, 2, 64, 16, 128, {{300, 1}, {20, 1}}, true},
      // the general kernel (attention.cu): prefill, chunks, mixed batches; 256 tokens or more: the
      // tensor-core kernel (attention_tc.cu), with hd64 / 128 / 256 and chunks mid-sequence
      {"prefill 37 hd64 gqa2 page16", 4, 2, 64, 16, 0, {{0, 37}}},
      {"tc prefill 300 hd128 gqa4", 8, 2, 128, 16, 0, {{0, 300}}},
      {"tc 3 seqs 120+200+5, chunks mid-sequence hd64", 4, 2, 64, 64, 0, {{0, 120}, {50, 200}, {7, 5}}},
      {"tc hd256 gqa8, 2 seqs, 32-key tiles", 16, 2, 256, 64, 0, {{0, 300}, {40, 70}}},
      {"tc prefill 260 + a decode row hd128 q8_0 blocks", 8, 8, 128, 64, 0, {{0, 260}, {500, 1}}},
      {"chunked prefill 70 after 90 hd256 mqa", 8, 1, 256, 32, 0, {{90, 70}}},
      {"mixed chunk + decode hd128 gqa8", 16, 2, 128, 16, 0, {{0, 20}, {100, 1}, {5, 7}, {63, 1}}},
      {"sliding window 32 prefill + decode hd64", 4, 2, 64, 16, 32, {{0, 100}, {200, 1}}},
      {"tc-sized sliding window 64, 400 tokens hd64", 4, 1, 64, 16, 64, {{0, 400}}},
      {"prefill hd80 odd group 2", 6, 3, 80, 16, 0, {{17, 9}, {3, 1}}},
      {"prefill hd512 gqa2 with a decode row", 4, 2, 512, 16, 0, {{0, 20}, {100, 1}}},
      {"prefill gpt-oss-like sinks window 16", 8, 2, 64, 16, 16, {{0, 40}, {10, 5}}, true},
      {"prefill hd16 (fixture heads) gqa2", 4, 2, 16, 16, 0, {{0, 23}, {30, 4}}},
  };
  uint32_t seed = 3900;
  for (const DType kv : {DType::F8_E4M3, DType::Q8_0})
    for (const QConfig& c : configs) run_attention(c, kv, seed++);
}

// Single decode tokens of a QK-norm model (Qwen3): on bf16 / f32 pages the fused decode kernel; on
// quantized pages the unfused calls (norm_rope, kv_write's quantizer, attention) on both sides.
TEST_F(CudaKvQuant, QkNormRopeAttentionOverQuantizedPages) {
  const std::vector<QConfig> configs = {
      {"decode hd128 gqa8 neox", 16, 2, 128, 16, 0, {{300, 1}}},
      {"decode hd128 gqa4 3000 keys", 8, 2, 128, 64, 0, {{2999, 1}}},
      {"prefill 20 after 30 hd128", 4, 2, 128, 16, 0, {{30, 20}}},
  };
  uint32_t seed = 3950;
  for (const DType kv : {DType::F8_E4M3, DType::Q8_0}) {
    for (const QConfig& c : configs) {
      const std::string name = c.name + (kv == DType::F8_E4M3 ? " fp8" : " q8_0");
      SCOPED_TRACE(name);
      const int64_t W = c.G * c.D, n_rot = c.D;
      const Plan pl = plan(c.seqs, c.page, seed);
      QPages pg;
      make_pages(pg, kv, pl.n_pages, c.page, c.G, c.D);
      uint32_t sd = seed * 11;
      const HostBatch hh = make(pl.hist);
      if (hh.T > 0) {
        const auto k = rand_bf16(static_cast<size_t>(hh.T * W), sd++), v = rand_bf16(k.size(), sd++);
        write_both(hh, pl, pg, k, v, DType::BF16);
      }
      const HostBatch hb = make(pl.now);
      const int64_t T = hb.T, HD = c.H * c.D;
      const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++, -3.0f, 3.0f);
      const auto k = rand_bf16(static_cast<size_t>(T * W), sd++, -3.0f, 3.0f);
      const auto v = rand_bf16(static_cast<size_t>(T * W), sd++);
      const auto wq = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
      const auto wk = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
      std::vector<float> inv(static_cast<size_t>(n_rot / 2));
      for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / n_rot);
      AttentionParams p;
      p.n_head = static_cast<int32_t>(c.H), p.n_head_kv = static_cast<int32_t>(c.G);
      p.head_dim = static_cast<int32_t>(c.D), p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
      const RmsNormParams np{1e-6f, 0.0f};
      RopeParams rp{RopeMode::kNeox, static_cast<int32_t>(c.D), static_cast<int32_t>(n_rot),
                    arena().host_f32(inv, {n_rot / 2}), 1.0f};
      std::vector<float> ref(static_cast<size_t>(T * HD)), cq = q, ck = k;
      cpu().qk_norm_rope_attention(np, arena().host_f32(wq, {c.D}), arena().host_f32(wk, {c.D}), rp, p,
                                   Tensor(cq.data(), DType::F32, {T, HD}), Tensor(ck.data(), DType::F32, {T, W}),
                                   arena().host_f32(v, {T, W}), info(hb, pl.table, pl.max_blocks, false), pg.cpu,
                                   Tensor(ref.data(), DType::F32, {T, HD}));
      rp.inv_freq = arena().dev_from(inv, DType::F32, {n_rot / 2});
      Tensor out = arena().dev_poisoned(DType::F32, {T, HD});
      gpu().qk_norm_rope_attention(np, arena().dev_from(wq, DType::F32, {c.D}), arena().dev_from(wk, DType::F32, {c.D}),
                                   rp, p, arena().dev_from(q, DType::F32, {T, HD}),
                                   arena().dev_from(k, DType::F32, {T, W}), arena().dev_from(v, DType::F32, {T, W}),
                                   info(hb, pl.table, pl.max_blocks, true), pg.gpu, out);
      const double e = compare(out, ref);
      report("qk_norm_rope_attention quantized KV", name, e);
      EXPECT_LE(e, 1e-3) << name;
      ++seed;
    }
  }
}

// attention_mla over quantized latent and RoPE-key pages (the CUDA-core kernel dequantizes each key
// row into its shared-memory tile): decode and prefill batches of two sequences (and a mixed one).
TEST_F(CudaKvQuant, AttentionMlaMatchesCpu) {
  const std::vector<MlaQConfig> configs = {
      // the deepseek_v3 fixture's shape: 4 heads, R 32, P 8 (q8_0: one short block for the RoPE key)
      {"mla tiny decode 2 seqs (split)", 4, 32, 8, 16, {{300, 1}, {37, 1}}},
      {"mla tiny prefill 2 seqs", 4, 32, 8, 16, {{0, 37}, {20, 13}}},
      {"mla tiny decode on tc (asked for)", 4, 32, 8, 16, {{500, 1}, {9, 1}}, 1},
      {"mla tiny prefill on tc (asked for)", 4, 32, 8, 16, {{10, 50}, {0, 3}}, 1},
      // DeepSeek-V2-Lite heads (16), R 512, P 64
      {"mla v2lite decode 2 seqs 4096 keys (split)", 16, 512, 64, 64, {{4095, 1}, {64, 1}}},
      {"mla v2lite decode 2 seqs split 7", 16, 512, 64, 16, {{900, 1}, {77, 1}}, -1, 7},
      {"mla v2lite prefill 2 seqs, 20 after 90 and 5 (split)", 16, 512, 64, 64, {{90, 20}, {0, 5}}},
      {"mla v2lite prefill 260 + 5 (tc-sized: still CUDA-core)", 16, 512, 64, 64, {{0, 260}, {40, 5}}},
      // DeepSeek-V3 heads (128: 8 head chunks)
      {"mla v3 decode 2 seqs", 128, 512, 64, 64, {{1200, 1}, {7, 1}}},
      {"mla v3 prefill 2 seqs, 40 after 30 and 3", 128, 512, 64, 32, {{30, 40}, {5, 3}}},
      {"mla v3 decode 2 seqs on tc (asked for, 4 row tiles)", 128, 512, 64, 64, {{2999, 1}, {100, 1}}, 1},
      {"mla v2lite prefill 100 after 60 + 1 on tc (asked for, split)", 16, 512, 64, 16, {{60, 100}, {7, 1}}, 1},
      // other latent widths, a mixed chunk + decode batch
      {"mla R128 P16 mixed chunk + decode", 8, 128, 16, 16, {{0, 20}, {100, 1}}},
      {"mla R256 P32 prefill 2 seqs", 6, 256, 32, 16, {{17, 9}, {3, 4}}},
  };
  uint32_t seed = 3990;
  for (const DType kv : {DType::F8_E4M3, DType::Q8_0})
    for (const MlaQConfig& c : configs) run_mla(c, kv, seed++);
}

}  // namespace
}  // namespace ft::testing
