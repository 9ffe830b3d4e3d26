// CUDA vs CPU: kv_write with unequal k and v widths (exact), and attention_mla (latent-space MLA) over
// random pages: prefill chunks, decode batches (split over each token's keys), mixed batches, F32 and
// BF16 pages and activations, both kernels (the exact CUDA-core one: 1e-4 with F32 everywhere; the
// bf16 tensor-core one: kTol) and every row-tile count of the tensor-core kernel, at the fixture's
// tiny shape (R 32, P 8, 4 heads), DeepSeek-V2-Lite's (16 heads) and DeepSeek-V3's (128 heads) with
// R 512, P 64. A recorded decode graph replays eager decode bit for bit. Unwritten page slots are NaN on
// the GPU, so reading one fails.
#include <algorithm>
#include <numeric>

#include "backend/op_harness.h"

#ifdef FT_HAVE_CUDA
#include "backend/cuda/attention_mla.h"
#endif

namespace ft::testing {
namespace {

/** Plan overrides of the CUDA kernel (cuda::MlaTuning); restored when it goes out of scope. */
struct Tuning {
  Tuning(int tc, int row_tiles, int n_split) {
#ifdef FT_HAVE_CUDA
    cuda::mla_tuning() = cuda::MlaTuning{tc, row_tiles, n_split};
#else
    (void)tc, (void)row_tiles, (void)n_split;
#endif
  }
  ~Tuning() {
#ifdef FT_HAVE_CUDA
    cuda::mla_tuning() = cuda::MlaTuning{};
#endif
  }
};

struct SeqSpec {
  int32_t history;  // tokens already in the cache
  int32_t n_new;    // tokens of this forward
};

struct MlaCase {
  std::string name;
  int64_t H, R, P, page;
  std::vector<SeqSpec> seqs;
  DType act, kv;
  int tc = -1, row_tiles = 0, n_split = 0;  // Tuning
};

class CudaMla : public GpuBatchTest {
 protected:
  /** Pages of S sequences (block tables a random permutation of the pool, 3 spare pages): k pages
   *  [n_pages, page, hk, dk], v pages [n_pages, page, hv, dv]; the CPU's F32 zeros, the GPU's `kv`
   *  poisoned. */
  struct Pool {
    int32_t max_blocks = 0;
    int64_t n_pages = 0;
    std::vector<int32_t> table;
    std::vector<float> kc, vc;
    KvLayer cpu_kv, gpu_kv;
  };
  Pool pool(int64_t S, int32_t max_len, int64_t page, int64_t hk, int64_t dk, int64_t hv, int64_t dv, DType kv,
            uint32_t seed) {
    Pool p;
    p.max_blocks = static_cast<int32_t>((max_len + page - 1) / page);
    p.n_pages = S * p.max_blocks + 3;
    std::vector<int32_t> perm(static_cast<size_t>(p.n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    p.table.assign(perm.begin(), perm.begin() + S * p.max_blocks);
    p.kc.assign(static_cast<size_t>(p.n_pages * page * hk * dk), 0.0f);
    p.vc.assign(static_cast<size_t>(p.n_pages * page * hv * dv), 0.0f);
    p.cpu_kv = KvLayer{Tensor(p.kc.data(), DType::F32, {p.n_pages, page, hk, dk}),
                       Tensor(p.vc.data(), DType::F32, {p.n_pages, page, hv, dv})};
    p.gpu_kv = KvLayer{arena().dev_poisoned(kv, {p.n_pages, page, hk, dk}), arena().dev_poisoned(kv, {p.n_pages, page, hv, dv})};
    return p;
  }

  /** kv_write of random bf16-exact rows for the runs, on both sides (GPU inputs in `act`). */
  void write(Pool& pl, const std::vector<std::pair<int32_t, int32_t>>& runs, int64_t wk, int64_t wv, DType act,
             uint32_t& sd) {
    const HostBatch hb = make(runs);
    if (hb.T == 0) return;
    const auto k = rand_bf16(static_cast<size_t>(hb.T * wk), sd++), v = rand_bf16(static_cast<size_t>(hb.T * wv), sd++);
    cpu().kv_write(info(hb, pl.table, pl.max_blocks, false), arena().host_f32(k, {hb.T, wk}),
                   arena().host_f32(v, {hb.T, wv}), pl.cpu_kv);
    gpu().kv_write(info(hb, pl.table, pl.max_blocks, true), arena().dev_from(k, act, {hb.T, wk}),
                   arena().dev_from(v, act, {hb.T, wv}), pl.gpu_kv);
  }

  /** Written page entries agree exactly (the rest stay NaN on the GPU, 0 on the CPU); returns how many
   *  were written. */
  size_t expect_pages_equal(const Pool& pl, const std::string& what) {
    size_t written = 0, bad = 0;
    for (int side = 0; side < 2; ++side) {
      const auto g = arena().read(side ? pl.gpu_kv.v : pl.gpu_kv.k);
      const std::vector<float>& c = side ? pl.vc : pl.kc;
      for (size_t i = 0; i < g.size(); ++i) {
        if (std::isnan(g[i])) continue;
        ++written;
        bad += g[i] != c[i];
      }
    }
    EXPECT_EQ(bad, 0u) << what << ": kv_write";
    return written;
  }

  void run(const MlaCase& c, uint32_t seed) {
    const int64_t S = static_cast<int64_t>(c.seqs.size());
    int32_t max_len = 0;
    for (const SeqSpec& s : c.seqs) max_len = std::max(max_len, s.history + s.n_new);
    Pool pl = pool(S, max_len, c.page, 1, c.R, 1, c.P, c.kv, seed);
    std::vector<std::pair<int32_t, int32_t>> hist, now;
    for (const SeqSpec& s : c.seqs) hist.push_back({0, s.history}), now.push_back({s.history, s.n_new});
    uint32_t sd = seed * 7;
    write(pl, hist, c.R, c.P, c.act, sd);
    write(pl, now, c.R, c.P, c.act, sd);
    int64_t tokens = 0;
    for (const SeqSpec& s : c.seqs) tokens += s.history + s.n_new;
    EXPECT_EQ(expect_pages_equal(pl, c.name), static_cast<size_t>(tokens * (c.R + c.P))) << c.name;

    const HostBatch hb = make(now);
    const int64_t T = hb.T, HR = c.H * c.R, HP = c.H * c.P;
    const auto ql = rand_bf16(static_cast<size_t>(T * HR), sd++, -2.0f, 2.0f);
    const auto qr = rand_bf16(static_cast<size_t>(T * HP), sd++, -2.0f, 2.0f);
    MlaAttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.kv_lora_rank = static_cast<int32_t>(c.R);
    p.rope_dim = static_cast<int32_t>(c.P), p.scale = 1.0f / std::sqrt(static_cast<float>(c.R / 4 + c.P));
    std::vector<float> ref(static_cast<size_t>(T * HR));
    cpu().attention_mla(p, info(hb, pl.table, pl.max_blocks, false), arena().host_f32(ql, {T, HR}),
                        arena().host_f32(qr, {T, HP}), pl.cpu_kv, Tensor(ref.data(), DType::F32, {T, HR}));
    Tensor out = arena().dev_poisoned(c.act, {T, HR});
    const BatchInfo dev_batch = info(hb, pl.table, pl.max_blocks, true);
    const Tensor dql = arena().dev_from(ql, c.act, {T, HR}), dqr = arena().dev_from(qr, c.act, {T, HP});
    {
      const Tuning tune(c.tc, c.row_tiles, c.n_split);
      gpu().attention_mla(p, dev_batch, dql, dqr, pl.gpu_kv, out);
    }
    // exact path: F32 everywhere on the CUDA-core kernel (F32 pages take it unless told otherwise)
    const bool exact = c.act == DType::F32 && c.kv == DType::F32 && c.tc != 1 && T < 256;
    const double tol = exact ? 1e-4 : kTol;
    const double e = compare(out, ref);
    report("attention_mla", c.name, e);
    EXPECT_LE(e, tol) << c.name;
  }
};

TEST_F(CudaMla, KvWriteUnequalWidthsIsExact) {
  // GQA-style multi-head k pages next to narrower v pages, both dtypes of pages and activations
  for (DType kv : {DType::F32, DType::BF16}) {
    for (DType act : {DType::F32, DType::BF16}) {
      Pool pl = pool(3, 70, 16, 2, 16, 1, 8, kv, 11);
      uint32_t sd = 5;
      write(pl, {{0, 40}, {0, 3}, {0, 70}}, 32, 8, act, sd);
      write(pl, {{40, 1}, {3, 20}, {70 - 1, 0}}, 32, 8, act, sd);
      const std::string what = std::string("pages ") + dtype_name(kv) + " act " + dtype_name(act);
      EXPECT_EQ(expect_pages_equal(pl, what), static_cast<size_t>((40 + 1 + 3 + 20 + 70) * (32 + 8))) << what;
      report("kv_write", "unequal widths 32 / 8, " + what + " exact", 0.0);
    }
  }
}

TEST_F(CudaMla, AttentionMatchesCpu) {
  const DType F = DType::F32, B = DType::BF16;
  const std::vector<MlaCase> cases = {
      // the fixture's shape (kv_lora_rank 32, rope 8, 4 heads)
      {"tiny prefill 37 f32 (exact)", 4, 32, 8, 16, {{0, 37}}, F, F},
      {"tiny prefill 130+37 page64 f32", 4, 32, 8, 64, {{0, 130}, {0, 37}}, F, F},
      {"tiny decode 4 seqs f32 (split)", 4, 32, 8, 16, {{300, 1}, {1000, 1}, {50, 1}, {0, 1}}, F, F},
      {"tiny mixed chunk+decode f32", 4, 32, 8, 16, {{0, 20}, {100, 1}, {5, 7}, {63, 1}}, F, F},
      {"tiny prefill 37 bf16 (tc)", 4, 32, 8, 16, {{0, 37}}, B, B},
      {"tiny decode 3 seqs bf16 (tc split)", 4, 32, 8, 16, {{700, 1}, {33, 1}, {0, 1}}, B, B},
      {"tiny mixed bf16 pages f32 act (tc)", 4, 32, 8, 32, {{0, 20}, {100, 1}, {5, 7}}, F, B},
      {"tiny decode f32 pages on tc", 4, 32, 8, 16, {{500, 1}, {9, 1}}, F, F, 1},
      {"tiny prefill bf16 pages on core", 4, 32, 8, 16, {{10, 50}}, B, B, 0},
      // DeepSeek-V2-Lite heads (16), R 512, P 64
      {"v2lite decode bs1 4096 f32 (core split)", 16, 512, 64, 64, {{4095, 1}}, F, F},
      {"v2lite decode bs4 bf16 (tc)", 16, 512, 64, 64, {{1500, 1}, {64, 1}, {3000, 1}, {1, 1}}, B, B},
      {"v2lite decode bs2 bf16 act f32 pages split 7", 16, 512, 64, 16, {{900, 1}, {77, 1}}, B, F, -1, 0, 7},
      {"v2lite prefill 20 after 90 f32 (core, split)", 16, 512, 64, 64, {{90, 20}}, F, F},
      {"v2lite prefill 100 after 60 bf16 (tc, split)", 16, 512, 64, 16, {{60, 100}}, B, B},
      {"v2lite prefill 2 seqs 260+5 f32 pages (tc, f32 loads)", 16, 512, 64, 64, {{0, 260}, {40, 5}}, F, F},
      // DeepSeek-V3 heads (128)
      {"v3 decode bs2 3000 bf16 (tc 4 tiles)", 128, 512, 64, 64, {{2999, 1}, {100, 1}}, B, B},
      {"v3 decode bs2 bf16, 1 row tile", 128, 512, 64, 64, {{1200, 1}, {7, 1}}, B, B, -1, 1},
      {"v3 decode bs2 bf16, 2 row tiles", 128, 512, 64, 64, {{1200, 1}, {7, 1}}, B, B, -1, 2},
      {"v3 decode bs1 f32 (core, 8 head chunks)", 128, 512, 64, 64, {{600, 1}}, F, F},
      {"v3 prefill 40 after 30 bf16 (tc)", 128, 512, 64, 32, {{30, 40}}, B, B},
      {"v3 prefill 40 after 30 bf16, 2 row tiles", 128, 512, 64, 32, {{30, 40}}, B, B, -1, 2},
      // other latent widths
      {"R128 P16 decode + prefill bf16", 8, 128, 16, 16, {{200, 1}, {0, 30}}, B, B},
      {"R256 P32 mixed f32", 6, 256, 32, 16, {{17, 9}, {3, 1}}, F, F},
  };
  const char* only = std::getenv("FT_MLA_ONLY");  // a substring of the case names to run (sanitizer passes)
  uint32_t seed = 1;
  for (const MlaCase& c : cases) {
    ++seed;
    if (!only || c.name.find(only) != std::string::npos) run(c, seed);
  }
}

// A decode step recorded as a graph with the key-range bound of the pool (as engine/ records it)
// replays what eager decode computes, bit for bit, on both kernels; so does a second replay.
TEST_F(CudaMla, DecodeGraphEqualsEager) {
  for (DType kv : {DType::BF16, DType::F32}) {
    const int64_t H = 16, R = 512, P = 64, page = 64;
    Pool pl = pool(3, 2048, page, 1, R, 1, P, kv, 3);
    uint32_t sd = 9;
    write(pl, {{0, 801}, {0, 40}, {0, 1500}}, R, P, DType::F32, sd);
    const HostBatch hb = make({{800, 1}, {39, 1}, {1499, 1}});
    BatchInfo batch = info(hb, pl.table, pl.max_blocks, true);
    MlaAttentionParams p{static_cast<int32_t>(H), static_cast<int32_t>(R), static_cast<int32_t>(P), 0.07f};
    const Tensor ql = arena().dev_from(rand_bf16(static_cast<size_t>(3 * H * R), sd++), DType::F32, {3, H * R});
    const Tensor qr = arena().dev_from(rand_bf16(static_cast<size_t>(3 * H * P), sd++), DType::F32, {3, H * P});
    Tensor eager = arena().dev_poisoned(DType::F32, {3, H * R}), graphed = arena().dev_poisoned(DType::F32, {3, H * R});
    gpu().attention_mla(p, batch, ql, qr, pl.gpu_kv, eager);
    batch.max_kv_len = pl.max_blocks * static_cast<int32_t>(page);  // the graph's bound, not the step's
    gpu().attention_mla(p, batch, ql, qr, pl.gpu_kv, graphed);      // eager first: one-time scratch
    arena().poison(graphed);
    auto g = gpu().capture([&] { gpu().attention_mla(p, batch, ql, qr, pl.gpu_kv, graphed); });
    ASSERT_TRUE(g);
    for (int rep = 0; rep < 2; ++rep) {
      g->launch();
      gpu().synchronize();
      EXPECT_TRUE(same_bits(eager, graphed)) << dtype_name(kv) << " replay " << rep;
      EXPECT_EQ(count_nonfinite(arena().read(graphed)), 0u);
      arena().poison(graphed);
    }
    report("attention_mla", std::string("graph replay == eager, ") + dtype_name(kv) + " pages", 0.0);
  }
}

}  // namespace
}  // namespace ft::testing
