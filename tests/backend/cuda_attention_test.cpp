// CUDA vs CPU: kv_write into paged KV (exact) and causal GQA attention over it for prefill chunks,
// decode batches of different lengths (split-K), mixed batches, several head dims and GQA groups,
// page sizes and a sliding window; head_dim 512 (Gemma 4's full layers) on every path that takes it. Unwritten KV slots are NaN on the GPU, so reading one fails.
#include <algorithm>
#include <numeric>

#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

struct SeqSpec {
  int32_t history;  // tokens already in the cache
  int32_t n_new;    // tokens of this forward
};

struct Config {
  std::string name;
  int64_t H, G, D, page;
  int32_t window;
  std::vector<SeqSpec> seqs;
};

class CudaAttention : public GpuBatchTest {
 protected:
  /** The KV pages of config c on both sides: block tables a random permutation of the pool, the CPU's
   *  pages F32 zeros, the GPU's `kv_dtype` poisoned; hist and now: each sequence's (first position,
   *  tokens) of its history and of this forward. */
  struct Pool {
    int32_t max_blocks = 0;
    std::vector<int32_t> table;
    std::vector<float> kc, vc;
    KvLayer cpu_kv, gpu_kv;
    std::vector<std::pair<int32_t, int32_t>> hist, now;
  };
  Pool pool(const Config& c, uint32_t seed, DType kv_dtype) {
    Pool p;
    const int64_t S = static_cast<int64_t>(c.seqs.size()), W = c.G * c.D;
    int32_t max_len = 0;
    for (const SeqSpec& s : c.seqs) max_len = std::max(max_len, s.history + s.n_new);
    p.max_blocks = static_cast<int32_t>((max_len + c.page - 1) / c.page);
    const int64_t n_pages = S * p.max_blocks + 3;
    std::vector<int32_t> perm(static_cast<size_t>(n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    p.table.assign(perm.begin(), perm.begin() + S * p.max_blocks);
    p.kc.assign(static_cast<size_t>(n_pages * c.page * W), 0.0f), p.vc = p.kc;
    p.cpu_kv = KvLayer{Tensor(p.kc.data(), DType::F32, {n_pages, c.page, c.G, c.D}),
                       Tensor(p.vc.data(), DType::F32, {n_pages, c.page, c.G, c.D})};
    p.gpu_kv = KvLayer{arena().dev_poisoned(kv_dtype, {n_pages, c.page, c.G, c.D}),
                       arena().dev_poisoned(kv_dtype, {n_pages, c.page, c.G, c.D})};
    for (const SeqSpec& s : c.seqs) p.hist.push_back({0, s.history}), p.now.push_back({s.history, s.n_new});
    return p;
  }

  /** The decode kernel (the "decode" cases) also writes its output's int8 form, with the bytes of a
   *  quantize launch; the other kernels do not. Called right after the attention. */
  void check_prepared_q8(const Q8Probe& pr, const Config& c, const Tensor& out) {
    expect_q8_probe(pr, out, c.name.rfind("decode", 0) == 0, c.name);
  }

  void run(const Config& c, uint32_t seed) {
    const int64_t W = c.G * c.D;
    Pool pl = pool(c, seed, DType::BF16);
    const std::vector<int32_t>& table = pl.table;
    const int32_t max_blocks = pl.max_blocks;
    const std::vector<float>& kc = pl.kc;
    const KvLayer &cpu_kv = pl.cpu_kv, &gpu_kv = pl.gpu_kv;
    const auto &hist = pl.hist, &now = pl.now;
    uint32_t sd = seed * 7;
    for (const auto& runs : {hist, now}) {
      const HostBatch hb = make(runs);
      if (hb.T == 0) continue;
      const auto k = rand_bf16(static_cast<size_t>(hb.T * W), sd++), v = rand_bf16(k.size(), sd++);
      cpu().kv_write(info(hb, table, max_blocks, false), arena().host_f32(k, {hb.T, W}), arena().host_f32(v, {hb.T, W}),
                     cpu_kv);
      gpu().kv_write(info(hb, table, max_blocks, true), arena().dev_from(k, DType::BF16, {hb.T, W}),
                     arena().dev_from(v, DType::BF16, {hb.T, W}), gpu_kv);
    }
    // written slots agree exactly; the rest stay NaN on the GPU and 0 on the CPU
    const auto gk = arena().read(gpu_kv.k);
    size_t mismatched = 0;
    for (size_t i = 0; i < gk.size(); ++i)
      if (!std::isnan(gk[i]) && gk[i] != kc[i]) ++mismatched;
    EXPECT_EQ(mismatched, 0u) << c.name << ": kv_write";

    const HostBatch hb = make(now);
    const int64_t T = hb.T, HD = c.H * c.D;
    const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++);
    AttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.n_head_kv = static_cast<int32_t>(c.G);
    p.head_dim = static_cast<int32_t>(c.D), p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    p.sliding_window = c.window;
    std::vector<float> ref(static_cast<size_t>(T * HD));
    cpu().attention(p, info(hb, table, max_blocks, false), arena().host_f32(q, {T, HD}), cpu_kv,
                    Tensor(ref.data(), DType::F32, {T, HD}));
    Tensor out = arena().dev_poisoned(DType::BF16, {T, HD});
    const BatchInfo dev_batch = info(hb, table, max_blocks, true);
    const Tensor dev_q = arena().dev_from(q, DType::BF16, {T, HD});
    Q8Probe probe = q8_probe(out);
    gpu().attention(p, dev_batch, dev_q, gpu_kv, out, &probe.q8);
    check_prepared_q8(probe, c, out);
    const double e = compare(out, ref);
    report("attention", c.name, e);
    EXPECT_LE(e, kTol) << c.name;
  }
};

TEST_F(CudaAttention, PrefillDecodeAndMixedBatches) {
  const std::vector<Config> configs = {
      {"prefill 37 hd16 gqa2 page16", 4, 2, 16, 16, 0, {{0, 37}}},
      {"prefill 130+37 hd16 page64", 4, 2, 16, 64, 0, {{0, 130}, {0, 37}}},
      {"decode 4 seqs hd128 gqa4 (split-K)", 8, 2, 128, 64, 0, {{300, 1}, {1000, 1}, {50, 1}, {129, 1}}},
      {"decode 1 seq 5000 hd64 (split-K)", 4, 1, 64, 64, 0, {{5000, 1}}},
      {"mixed chunk+decode hd64 gqa8", 16, 2, 64, 16, 0, {{0, 20}, {100, 1}, {5, 7}, {63, 1}}},
      {"chunked prefill 200 after 90 hd128", 32, 4, 128, 64, 0, {{90, 200}}},
      {"sliding window 32 prefill+decode", 4, 2, 64, 16, 32, {{0, 100}, {200, 1}}},
      {"mqa group16 hd256", 16, 1, 256, 64, 0, {{10, 30}, {300, 1}}},
      {"hd80 odd dims", 6, 3, 80, 16, 0, {{17, 9}, {3, 1}}},
      // one token per sequence: the decode kernel (attention_decode.cu)
      {"decode sliding window 64, 3 seqs hd64", 4, 2, 64, 16, 64, {{200, 1}, {30, 1}, {1000, 1}}},
      {"decode mha hd256 page32", 4, 4, 256, 32, 0, {{700, 1}, {0, 1}}},
      {"decode gqa8 hd128 long 9000", 16, 2, 128, 64, 0, {{9000, 1}, {64, 1}}},
      {"decode 2 seqs 1900 + 40 keys hd128 gqa4 (cluster, 119 keys a block)", 8, 2, 128, 64, 0, {{1899, 1}, {39, 1}}},
      // >= 256 tokens: the tensor-core kernel (attention_tc.cu)
      {"tc prefill 300 hd128 gqa4 page16", 8, 2, 128, 16, 0, {{0, 300}}},
      {"tc 3 seqs 120+200+5, chunks mid-sequence hd64", 4, 2, 64, 64, 0, {{0, 120}, {50, 200}, {7, 5}}},
      {"tc sliding window 64, 400 tokens hd64", 4, 1, 64, 16, 64, {{0, 400}}},
      {"tc prefill 260 + a decode row hd128", 8, 8, 128, 64, 0, {{0, 260}, {500, 1}}},
      {"tc hd96 mha", 4, 4, 96, 32, 0, {{0, 256}}},
      {"tc hd256 gqa8 (Qwen3-Next), 2 seqs, 32-key tiles", 16, 2, 256, 64, 0, {{0, 300}, {40, 70}}},
  };
  uint32_t seed = 1;
  for (const Config& c : configs) run(c, seed++);
}

// head_dim 512 (Gemma 4's full attention layers: global_head_dim): the general kernel at 16 dims a lane
// (160.5 KB of tiles a block) serves prefill (short and past the tensor-core threshold, which stops at
// 256), chunked prefill and mixed batches; the decode kernel (16 dims a lane; split-K, cluster and
// 4-heads-a-block forms) one token a sequence; with and without a sliding window.
TEST_F(CudaAttention, HeadDim512LikeGemma4) {
  const std::vector<Config> configs = {
      {"hd512 prefill 37 gqa2 page16", 8, 4, 512, 16, 0, {{0, 37}}},
      {"hd512 prefill 300 (no tensor-core kernel) gqa4", 8, 2, 512, 64, 0, {{0, 300}}},
      {"hd512 chunked prefill 70 after 90 mqa", 8, 1, 512, 32, 0, {{90, 70}}},
      {"hd512 mixed chunk + decode gqa2", 4, 2, 512, 16, 0, {{0, 20}, {100, 1}, {5, 7}}},
      {"decode hd512 mqa 3 seqs (split-K, cluster on Hopper)", 4, 1, 512, 32, 0, {{700, 1}, {0, 1}, {64, 1}}},
      {"decode hd512 gqa2 one seq 5000 keys (split-K)", 4, 2, 512, 64, 0, {{5000, 1}}},
      {"decode hd512 gqa8 9 seqs (4 heads a block)", 16, 2, 512, 64, 0,
       {{300, 1}, {10, 1}, {50, 1}, {129, 1}, {1, 1}, {77, 1}, {200, 1}, {5, 1}, {400, 1}}},
      {"hd512 sliding window 64 prefill 200 + decode", 4, 2, 512, 16, 64, {{0, 200}, {300, 1}}},
      {"decode hd512 sliding window 128, 2 seqs", 4, 2, 512, 32, 128, {{1000, 1}, {40, 1}}},
  };
  uint32_t seed = 512;
  for (const Config& c : configs) run(c, seed++);
  // Past 512: still refused by name.
  const Config big{"hd640", 2, 1, 640, 16, 0, {{0, 4}}};
  Pool pl = pool(big, 9, DType::BF16);
  const HostBatch hb = make(pl.now);
  AttentionParams p;
  p.n_head = 2, p.n_head_kv = 1, p.head_dim = 640, p.scale = 0.04f;
  try {
    gpu().attention(p, info(hb, pl.table, pl.max_blocks, true), arena().dev(DType::BF16, {hb.T, 2 * 640}), pl.gpu_kv,
                    arena().dev(DType::BF16, {hb.T, 2 * 640}));
    ADD_FAILURE() << "head_dim 640 accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    EXPECT_NE(std::string(e.what()).find("head_dim 640"), std::string::npos) << e.what();
  }
}

// qk_norm_rope_attention (per-head QK-norm, RoPE, the new k and v into the pages, attention) against the
// CPU's unfused calls. A single decode token takes the fused decode kernel (the norm and the rotation
// in the attention kernel, which also stores the token's k and v); the cases marked unfused take the
// default (the same calls on the GPU). Checks the output and the new tokens' rows of the pages.
struct FusedCase {
  Config c;
  int32_t n_rot;
  RopeMode mode;
  DType act, kv;
};

TEST_F(CudaAttention, QkNormRopeAttentionMatchesUnfused) {
  const std::vector<FusedCase> cases = {
      {{"decode hd128 gqa8 neox", 16, 2, 128, 16, 0, {{300, 1}}}, 128, RopeMode::kNeox, DType::F32, DType::F32},
      {{"decode position 0 hd128 gqa8", 16, 2, 128, 16, 0, {{0, 1}}}, 128, RopeMode::kNeox, DType::F32, DType::F32},
      {{"decode hd128 gqa4 neox bf16", 8, 2, 128, 64, 0, {{640, 1}}}, 128, RopeMode::kNeox, DType::BF16, DType::BF16},
      {{"decode 3 seqs hd128 (unfused)", 16, 2, 128, 16, 0, {{300, 1}, {0, 1}, {1000, 1}}}, 128, RopeMode::kNeox,
       DType::F32, DType::F32},
      {{"decode hd128 normal mode, f32 act bf16 kv", 4, 2, 128, 32, 0, {{77, 1}}}, 128, RopeMode::kNormal, DType::F32,
       DType::BF16},
      {{"decode hd256 partial rotation 64", 4, 1, 256, 64, 0, {{129, 1}}}, 64, RopeMode::kNeox, DType::F32,
       DType::F32},
      {{"decode sliding window 32 hd128", 4, 2, 128, 16, 32, {{100, 1}}}, 128, RopeMode::kNeox, DType::F32, DType::F32},
      {{"prefill 20 after 30 hd128 (unfused)", 4, 2, 128, 16, 0, {{30, 20}}}, 128, RopeMode::kNeox, DType::F32,
       DType::F32},
      {{"decode hd64 (unfused)", 4, 2, 64, 16, 0, {{40, 1}}}, 64, RopeMode::kNeox, DType::F32, DType::F32},
      {{"decode mha hd128 (group 1)", 4, 4, 128, 16, 0, {{90, 1}}}, 128, RopeMode::kNeox, DType::F32, DType::F32},
      {{"decode hd128 normal mode rotation 64", 8, 2, 128, 16, 0, {{33, 1}}}, 64, RopeMode::kNormal, DType::F32,
       DType::F32},
      {{"decode hd128 neox rotation 64", 8, 2, 128, 16, 0, {{200, 1}}}, 64, RopeMode::kNeox, DType::F32, DType::F32},
      {{"decode bf16 act f32 kv", 8, 2, 128, 16, 0, {{150, 1}}}, 128, RopeMode::kNeox, DType::BF16, DType::F32},
      // past kDecodeClusterKeys: many splits merged through global memory rather than in a cluster
      {{"decode hd128 gqa4 3000 keys", 8, 2, 128, 64, 0, {{2999, 1}}}, 128, RopeMode::kNeox, DType::BF16, DType::BF16},
  };
  uint32_t seed = 500;
  for (const FusedCase& fc : cases) {
    const Config& c = fc.c;
    const int64_t W = c.G * c.D;
    Pool pl = pool(c, seed, fc.kv);
    const std::vector<int32_t>& table = pl.table;
    const int32_t max_blocks = pl.max_blocks;
    const std::vector<float> &kc = pl.kc, &vc = pl.vc;
    const KvLayer &cpu_kv = pl.cpu_kv, &gpu_kv = pl.gpu_kv;
    uint32_t sd = seed * 11;
    const HostBatch hh = make(pl.hist);
    if (hh.T > 0) {  // the history, as the pages hold it on both sides
      const auto k = rand_bf16(static_cast<size_t>(hh.T * W), sd++), v = rand_bf16(k.size(), sd++);
      cpu().kv_write(info(hh, table, max_blocks, false), arena().host_f32(k, {hh.T, W}), arena().host_f32(v, {hh.T, W}),
                     cpu_kv);
      gpu().kv_write(info(hh, table, max_blocks, true), arena().dev_from(k, fc.kv, {hh.T, W}),
                     arena().dev_from(v, fc.kv, {hh.T, W}), gpu_kv);
    }
    const HostBatch hb = make(pl.now);
    const int64_t T = hb.T, HD = c.H * c.D;
    const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++, -3.0f, 3.0f);
    const auto k = rand_bf16(static_cast<size_t>(T * W), sd++, -3.0f, 3.0f);
    const auto v = rand_bf16(static_cast<size_t>(T * W), sd++);
    const auto wq = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
    const auto wk = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
    std::vector<float> inv(static_cast<size_t>(fc.n_rot / 2));
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / fc.n_rot);
    AttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.n_head_kv = static_cast<int32_t>(c.G);
    p.head_dim = static_cast<int32_t>(c.D), p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    p.sliding_window = c.window;
    const RmsNormParams np{1e-6f, 0.0f};
    RopeParams rp{fc.mode, static_cast<int32_t>(c.D), fc.n_rot, arena().host_f32(inv, {fc.n_rot / 2}), 1.0f};
    std::vector<float> ref(static_cast<size_t>(T * HD)), cq = q, ck = k;
    cpu().qk_norm_rope_attention(np, arena().host_f32(wq, {c.D}), arena().host_f32(wk, {c.D}), rp, p,
                                 Tensor(cq.data(), DType::F32, {T, HD}), Tensor(ck.data(), DType::F32, {T, W}),
                                 arena().host_f32(v, {T, W}), info(hb, table, max_blocks, false), cpu_kv,
                                 Tensor(ref.data(), DType::F32, {T, HD}));
    rp.inv_freq = arena().dev_from(inv, DType::F32, {fc.n_rot / 2});
    Tensor out = arena().dev_poisoned(fc.act, {T, HD}), dq = arena().dev_from(q, fc.act, {T, HD});
    const Tensor dwq = arena().dev_from(wq, DType::F32, {c.D}), dwk = arena().dev_from(wk, DType::BF16, {c.D});
    const Tensor dk = arena().dev_from(k, fc.act, {T, W}), dv = arena().dev_from(v, fc.act, {T, W});
    const BatchInfo dev_batch = info(hb, table, max_blocks, true);
    Q8Probe probe = q8_probe(out);
    gpu().qk_norm_rope_attention(np, dwq, dwk, rp, p, dq, dk, dv, dev_batch, gpu_kv, out, &probe.q8);
    check_prepared_q8(probe, c, out);
    // The fused kernel leaves q as it was (its heads are normalised in registers); the unfused calls
    // normalise it in place. The cases not marked unfused must take the fused kernel.
    EXPECT_EQ(arena().read(dq) == q, c.name.find("unfused") == std::string::npos) << c.name;
    const double tol = fc.act == DType::F32 && fc.kv == DType::F32 ? 1e-4 : kTol;
    const double e = compare(out, ref);
    report("qk_norm_rope_attention", c.name, e);
    EXPECT_LE(e, tol) << c.name;
    // the new tokens' k and v rows of the pages
    const auto gk = arena().read(gpu_kv.k), gv = arena().read(gpu_kv.v);
    double num_k = 0, den_k = 0, num_v = 0, den_v = 0;
    for (int64_t t = 0; t < T; ++t) {
      const int32_t pos = hb.pos[static_cast<size_t>(t)], sq = hb.seq[static_cast<size_t>(t)];
      const int64_t page = table[static_cast<size_t>(sq * max_blocks + pos / c.page)];
      const int64_t row = (page * c.page + pos % c.page) * W;
      for (int64_t i = row; i < row + W; ++i) {
        num_k += (gk[i] - kc[i]) * (gk[i] - kc[i]), den_k += kc[i] * kc[i];
        num_v += (gv[i] - vc[i]) * (gv[i] - vc[i]), den_v += vc[i] * vc[i];
      }
    }
    const double ek = std::sqrt(num_k / den_k), ev = std::sqrt(num_v / den_v);  // NaN (unwritten) fails
    report("qk_norm_rope_attention k pages", c.name, ek);
    EXPECT_LE(ek, tol) << c.name;
    EXPECT_LE(ev, tol) << c.name;
    ++seed;
  }
}

}  // namespace
}  // namespace ft::testing
