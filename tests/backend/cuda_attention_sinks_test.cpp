// CUDA attention with sinks (AttentionParams::sinks, gpt-oss) against the CPU backend, over every CUDA
// attention path: the CUDA-core kernel (short prefill, split and unsplit, its combine kernel, its
// decode form for head shapes the decode kernel does not take), the tensor-core prefill kernel, the
// decode kernel (a range in one block, the cluster merge, the global last-block merge) and the fused
// qk_norm_rope_attention decode; F32 and BF16 activations and pages, head_dim 64 and 128, gpt-oss's
// heads (64 query heads over 8 kv heads of 64), sliding windows of 128 that cross pages. A naive
// double-precision reference checks the CPU twin itself on every case, and each case must change when
// its sinks are dropped (so a kernel that ignores them fails). Window cases poison (NaN) the GPU's
// KV pages that lie wholly below every query's window: a kernel that reads one fails (those pages may
// be released by the KV pool).
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

struct SinkCase {
  std::string name;
  int64_t H, G, D, page;
  int32_t window;
  std::vector<SeqSpec> seqs;
  DType act, kv;
};

/** The decode kernel's int8 form of its output (attention_decode_writes_q8) for these heads. */
bool decode_writes_q8(int64_t H, int64_t G, int64_t D) {
  const int64_t group = H / G;
  const bool supports = D % 4 == 0 && (D <= 128 || (D <= 256 && D % 8 == 0)) &&
                        (group == 1 || group == 2 || group == 4 || group == 8);
  return supports && D % 32 == 0 && ((group == 1 ? 1 : 2) * D) % 128 == 0;
}

class CudaAttentionSinks : public GpuBatchTest {
 protected:
  struct Pool {
    int32_t max_blocks = 0;
    int64_t n_pages = 0;
    std::vector<int32_t> table;
    std::vector<float> kc, vc;
    KvLayer cpu_kv, gpu_kv;
    std::vector<std::pair<int32_t, int32_t>> hist, now;
  };

  /** Block tables a random permutation of the pool; CPU pages F32 zeros, GPU pages of `kv` poisoned. */
  Pool pool(const SinkCase& c, uint32_t seed) {
    Pool p;
    const int64_t S = static_cast<int64_t>(c.seqs.size()), W = c.G * c.D;
    int32_t max_len = 0;
    for (const SeqSpec& s : c.seqs) max_len = std::max(max_len, s.history + s.n_new);
    p.max_blocks = static_cast<int32_t>((max_len + c.page - 1) / c.page);
    p.n_pages = S * p.max_blocks + 3;
    std::vector<int32_t> perm(static_cast<size_t>(p.n_pages));
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), std::mt19937(seed));
    p.table.assign(perm.begin(), perm.begin() + S * p.max_blocks);
    p.kc.assign(static_cast<size_t>(p.n_pages * c.page * W), 0.0f), p.vc = p.kc;
    p.cpu_kv = KvLayer{Tensor(p.kc.data(), DType::F32, {p.n_pages, c.page, c.G, c.D}),
                       Tensor(p.vc.data(), DType::F32, {p.n_pages, c.page, c.G, c.D})};
    p.gpu_kv = KvLayer{arena().dev_poisoned(c.kv, {p.n_pages, c.page, c.G, c.D}),
                       arena().dev_poisoned(c.kv, {p.n_pages, c.page, c.G, c.D})};
    for (const SeqSpec& s : c.seqs) p.hist.push_back({0, s.history}), p.now.push_back({s.history, s.n_new});
    return p;
  }

  /** Writes every sequence's history (random, rounded to bf16) into both pools. */
  void write_history(const SinkCase& c, Pool& p, uint32_t& sd) {
    const HostBatch hb = make(p.hist);
    if (hb.T == 0) return;
    const int64_t W = c.G * c.D;
    const auto k = rand_bf16(static_cast<size_t>(hb.T * W), sd++), v = rand_bf16(k.size(), sd++);
    cpu().kv_write(info(hb, p.table, p.max_blocks, false), arena().host_f32(k, {hb.T, W}), arena().host_f32(v, {hb.T, W}),
                   p.cpu_kv);
    gpu().kv_write(info(hb, p.table, p.max_blocks, true), arena().dev_from(k, c.act, {hb.T, W}),
                   arena().dev_from(v, c.act, {hb.T, W}), p.gpu_kv);
  }

  /** Poisons (NaN) the GPU pages wholly below the window of every query of their sequence in `now`;
   *  returns how many. */
  int poison_below_window(const SinkCase& c, const Pool& p) {
    if (c.window <= 0) return 0;
    int n = 0;
    const int64_t page_elems = c.page * c.G * c.D;
    for (size_t s = 0; s < c.seqs.size(); ++s) {
      const int32_t first_query = c.seqs[s].history;  // the lowest position of this forward
      const int64_t lo = std::max<int64_t>(0, first_query - c.window + 1);
      for (int64_t j = 0; (j + 1) * c.page <= lo; ++j) {
        const int64_t page = p.table[s * static_cast<size_t>(p.max_blocks) + static_cast<size_t>(j)];
        for (const Tensor* t : {&p.gpu_kv.k, &p.gpu_kv.v})
          arena().poison(Tensor(static_cast<uint8_t*>(t->data) + page * page_elems * dtype_bytes(c.kv, 1), c.kv,
                                {page_elems}, Device::kCuda));
        ++n;
      }
    }
    return n;
  }

  /** Naive double-precision attention with sinks over the CPU pages (the definition in ops.h). */
  std::vector<float> naive(const SinkCase& c, const Pool& p, const HostBatch& hb, const std::vector<float>& q,
                           const std::vector<float>& sinks) {
    const int64_t H = c.H, G = c.G, D = c.D, group = H / G;
    const double scale = 1.0 / std::sqrt(static_cast<double>(D));
    std::vector<float> out(static_cast<size_t>(hb.T * H * D));
    for (int32_t t = 0; t < hb.T; ++t) {
      const int32_t pos = hb.pos[static_cast<size_t>(t)], s = hb.seq[static_cast<size_t>(t)];
      const int32_t lo = c.window > 0 ? std::max(0, pos - c.window + 1) : 0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / group;
        std::vector<double> sc;
        for (int32_t j = lo; j <= pos; ++j) {
          const int64_t page = p.table[static_cast<size_t>(s * p.max_blocks + j / c.page)];
          const float* kr = p.kc.data() + ((page * c.page + j % c.page) * G + g) * D;
          double d = 0;
          for (int64_t i = 0; i < D; ++i) d += static_cast<double>(q[static_cast<size_t>((t * H + h) * D + i)]) * kr[i];
          sc.push_back(d * scale);
        }
        double mx = sinks[static_cast<size_t>(h)];
        for (double v : sc) mx = std::max(mx, v);
        double den = std::exp(sinks[static_cast<size_t>(h)] - mx);
        for (double& v : sc) den += (v = std::exp(v - mx));
        for (int64_t i = 0; i < D; ++i) {
          double acc = 0;
          for (int32_t j = lo; j <= pos; ++j) {
            const int64_t page = p.table[static_cast<size_t>(s * p.max_blocks + j / c.page)];
            acc += sc[static_cast<size_t>(j - lo)] * p.vc[static_cast<size_t>(((page * c.page + j % c.page) * G + g) * D + i)];
          }
          out[static_cast<size_t>((t * H + h) * D + i)] = static_cast<float>(acc / den);
        }
      }
    }
    return out;
  }

  AttentionParams params(const SinkCase& c) {
    AttentionParams p;
    p.n_head = static_cast<int32_t>(c.H), p.n_head_kv = static_cast<int32_t>(c.G);
    p.head_dim = static_cast<int32_t>(c.D), p.scale = 1.0f / std::sqrt(static_cast<float>(c.D));
    p.sliding_window = c.window;
    return p;
  }

  /** Per-head sinks in [-3, 5] + log(keys / 8) for ranges of `keys` keys (some heads' sinks dominate,
   *  some vanish: they matter at any length), one very negative. */
  static std::vector<float> make_sinks(int64_t H, int64_t keys, uint32_t seed) {
    const float shift = std::log(std::max(1.0f, static_cast<float>(keys) / 8.0f));
    std::vector<float> s = rand_bf16(static_cast<size_t>(H), seed, -3.0f + shift, 5.0f + shift);
    s[static_cast<size_t>(H / 2)] = -40.0f;
    return s;
  }
  /** Keys a query of the case sees at most. */
  static int64_t range_of(const SinkCase& c, const HostBatch& hb) {
    return c.window > 0 ? std::min<int64_t>(c.window, hb.max_kv_len) : hb.max_kv_len;
  }

  void run(const SinkCase& c, uint32_t seed) {
    SCOPED_TRACE(c.name);
    Pool pl = pool(c, seed);
    uint32_t sd = seed * 13;
    write_history(c, pl, sd);
    const HostBatch hb = make(pl.now);
    const int64_t T = hb.T, W = c.G * c.D, HD = c.H * c.D;
    {  // this forward's keys and values, written before the attention as a model does
      const auto k = rand_bf16(static_cast<size_t>(T * W), sd++), v = rand_bf16(k.size(), sd++);
      cpu().kv_write(info(hb, pl.table, pl.max_blocks, false), arena().host_f32(k, {T, W}), arena().host_f32(v, {T, W}),
                     pl.cpu_kv);
      gpu().kv_write(info(hb, pl.table, pl.max_blocks, true), arena().dev_from(k, c.act, {T, W}),
                     arena().dev_from(v, c.act, {T, W}), pl.gpu_kv);
    }
    const int poisoned = poison_below_window(c, pl);
    if (c.window > 0) {
      EXPECT_GT(poisoned, 0) << "a window case should have pages below its window";
    }
    const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++, -2.0f, 2.0f);
    const std::vector<float> sinks = make_sinks(c.H, range_of(c, hb), sd++);
    AttentionParams p = params(c);
    std::vector<float> ref(static_cast<size_t>(T * HD)), ref_plain(ref.size());
    const BatchInfo cpu_batch = info(hb, pl.table, pl.max_blocks, false);
    cpu().attention(p, cpu_batch, arena().host_f32(q, {T, HD}), pl.cpu_kv, Tensor(ref_plain.data(), DType::F32, {T, HD}));
    p.sinks = arena().host_f32(sinks, {c.H});
    cpu().attention(p, cpu_batch, arena().host_f32(q, {T, HD}), pl.cpu_kv, Tensor(ref.data(), DType::F32, {T, HD}));
    const double twin = rel_l2(ref, naive(c, pl, hb, q, sinks));
    EXPECT_LE(twin, 1e-5) << "the CPU twin against the naive definition";
    const double effect = rel_l2(ref_plain, ref);
    EXPECT_GT(effect, 0.05) << "the sinks barely change this case: it would not catch a kernel ignoring them";

    p.sinks = arena().dev_from(sinks, DType::F32, {c.H});
    Tensor out = arena().dev_poisoned(c.act, {T, HD});
    const BatchInfo dev_batch = info(hb, pl.table, pl.max_blocks, true);
    const Tensor dq = arena().dev_from(q, c.act, {T, HD});
    Q8Probe probe = q8_probe(out);
    gpu().attention(p, dev_batch, dq, pl.gpu_kv, out, &probe.q8);
    // the decode kernel writes it for up to 16 rows (CudaOps::prepare_q8)
    const bool decode_kernel = T == hb.S && T <= 16 && decode_writes_q8(c.H, c.G, c.D);
    expect_q8_probe(probe, out, decode_kernel, c.name);  // the int8 form is of the sink-normalised output
    const bool tc = T != hb.S && T >= 256 && (c.D == 64 || c.D == 96 || c.D == 128);
    const double tol = c.act == DType::F32 && c.kv == DType::F32 && !tc ? 1e-4 : kTol;
    const double e = compare(out, ref);
    report("attention sinks", c.name, e);
    EXPECT_LE(e, tol);
  }
};

TEST_F(CudaAttentionSinks, EveryPathMatchesTheCpu) {
  const DType f = DType::F32, b = DType::BF16;
  const std::vector<SinkCase> cases = {
      // CUDA-core kernel: prefill under 256 tokens (split over keys and merged by the combine kernel, or not)
      {"prefill 60 after 40 gpt-oss heads hd64 (split + combine)", 64, 8, 64, 16, 0, {{40, 60}}, f, f},
      {"prefill 200 gpt-oss heads hd64 (one split)", 64, 8, 64, 16, 0, {{0, 200}}, b, b},
      {"prefill 90 hd128 gqa4 f32 act bf16 kv", 8, 2, 128, 32, 0, {{10, 90}}, f, b},
      {"mixed chunk + decode rows hd64 gqa8, window 128", 16, 2, 64, 16, 128, {{300, 40}, {500, 1}, {130, 1}}, f, f},
      {"decode rows, group 16 (the CUDA-core kernel's decode + combine)", 16, 1, 64, 16, 0, {{700, 1}, {30, 1}}, f, f},
      // tensor-core prefill
      {"tc prefill 300 gpt-oss heads hd64", 64, 8, 64, 16, 0, {{0, 300}}, b, b},
      {"tc chunk 300 after 600, window 128 crossing pages hd64", 64, 8, 64, 16, 128, {{600, 300}}, f, f},
      {"tc 2 seqs, window 128 hd128 gqa4", 8, 2, 128, 16, 128, {{250, 260}, {0, 20}}, b, b},
      // the decode kernel
      {"decode 11 keys: one block", 64, 8, 64, 16, 0, {{10, 1}}, f, f},
      {"decode 500 keys hd64 (cluster merge)", 64, 8, 64, 16, 0, {{499, 1}}, b, b},
      {"decode 3 seqs hd128 gqa4 (cluster merge)", 8, 2, 128, 64, 0, {{300, 1}, {5, 1}, {1000, 1}}, f, f},
      {"decode 3000 keys hd64 (merge by the last block)", 64, 8, 64, 16, 0, {{2999, 1}}, f, b},
      {"decode 4000 keys hd128 gqa8 (merge by the last block)", 16, 2, 128, 64, 0, {{3999, 1}, {70, 1}}, b, b},
      {"decode window 128 at 1000, page 16 (cluster)", 64, 8, 64, 16, 128, {{1000, 1}}, f, f},
      {"decode window 128 at 5000 + a short seq (last block)", 64, 8, 64, 16, 128, {{5000, 1}, {2500, 1}}, b, b},
      {"decode 20 seqs window 128 hd64 (global partials)", 64, 8, 64, 16, 128,
       {{200, 1}, {300, 1}, {400, 1}, {500, 1}, {129, 1}, {128, 1}, {127, 1}, {1, 1}, {0, 1}, {700, 1},
        {800, 1}, {900, 1}, {1000, 1}, {1100, 1}, {1200, 1}, {1300, 1}, {1400, 1}, {1500, 1}, {160, 1}, {2100, 1}},
       f, f},
  };
  uint32_t seed = 900;
  for (const SinkCase& c : cases) run(c, seed++);
}

// qk_norm_rope_attention with sinks: a single decode token of head_dim 128 takes the fused decode
// kernel (QK-norm and RoPE in the attention kernel), head_dim 64 the unfused calls; both as the CPU's.
TEST_F(CudaAttentionSinks, QkNormRopeAttentionWithSinks) {
  const std::vector<SinkCase> cases = {
      {"fused decode hd128 gqa8 f32", 16, 2, 128, 16, 0, {{300, 1}}, DType::F32, DType::F32},
      {"fused decode hd128 gqa4 bf16 window 128", 8, 2, 128, 16, 128, {{640, 1}}, DType::BF16, DType::BF16},
      {"fused decode hd128 4000 keys (last block)", 8, 2, 128, 64, 0, {{3999, 1}}, DType::F32, DType::F32},
      {"decode hd64 gpt-oss heads (unfused)", 64, 8, 64, 16, 0, {{40, 1}}, DType::F32, DType::F32},
  };
  uint32_t seed = 1500;
  for (const SinkCase& c : cases) {
    SCOPED_TRACE(c.name);
    Pool pl = pool(c, seed);
    uint32_t sd = seed * 17;
    write_history(c, pl, sd);
    poison_below_window(c, pl);
    const HostBatch hb = make(pl.now);
    const int64_t T = hb.T, W = c.G * c.D, HD = c.H * c.D;
    const auto q = rand_bf16(static_cast<size_t>(T * HD), sd++, -3.0f, 3.0f);
    const auto k = rand_bf16(static_cast<size_t>(T * W), sd++, -3.0f, 3.0f);
    const auto v = rand_bf16(static_cast<size_t>(T * W), sd++);
    const auto wq = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
    const auto wk = rand_bf16(static_cast<size_t>(c.D), sd++, 0.5f, 1.5f);
    const std::vector<float> sinks = make_sinks(c.H, range_of(c, hb), sd++);
    std::vector<float> inv(static_cast<size_t>(c.D / 2));
    for (size_t i = 0; i < inv.size(); ++i) inv[i] = std::pow(10000.0f, -2.0f * static_cast<float>(i) / c.D);
    AttentionParams p = params(c);
    p.sinks = arena().host_f32(sinks, {c.H});
    const RmsNormParams np{1e-6f, 0.0f};
    RopeParams rp{RopeMode::kNeox, static_cast<int32_t>(c.D), static_cast<int32_t>(c.D),
                  arena().host_f32(inv, {c.D / 2}), 1.0f};
    std::vector<float> ref(static_cast<size_t>(T * HD)), cq = q, ck = k;
    cpu().qk_norm_rope_attention(np, arena().host_f32(wq, {c.D}), arena().host_f32(wk, {c.D}), rp, p,
                                 Tensor(cq.data(), DType::F32, {T, HD}), Tensor(ck.data(), DType::F32, {T, W}),
                                 arena().host_f32(v, {T, W}), info(hb, pl.table, pl.max_blocks, false), pl.cpu_kv,
                                 Tensor(ref.data(), DType::F32, {T, HD}));
    rp.inv_freq = arena().dev_from(inv, DType::F32, {c.D / 2});
    p.sinks = arena().dev_from(sinks, DType::F32, {c.H});
    Tensor out = arena().dev_poisoned(c.act, {T, HD}), dq = arena().dev_from(q, c.act, {T, HD});
    gpu().qk_norm_rope_attention(np, arena().dev_from(wq, DType::F32, {c.D}), arena().dev_from(wk, DType::F32, {c.D}), rp,
                                 p, dq, arena().dev_from(k, c.act, {T, W}), arena().dev_from(v, c.act, {T, W}),
                                 info(hb, pl.table, pl.max_blocks, true), pl.gpu_kv, out);
    // The fused kernel leaves q as it was; the unfused calls normalise it in place.
    EXPECT_EQ(arena().read(dq) == q, c.name.find("unfused") == std::string::npos);
    const double tol = c.act == DType::F32 && c.kv == DType::F32 ? 1e-4 : kTol;
    const double e = compare(out, ref);
    report("qk_norm_rope_attn sinks", c.name, e);
    EXPECT_LE(e, tol);
    ++seed;
  }
}

TEST_F(CudaAttentionSinks, RejectsBadSinks) {
  const SinkCase c{"", 8, 2, 64, 16, 0, {{10, 1}}, DType::F32, DType::F32};
  Pool pl = pool(c, 3);
  const HostBatch hb = make(pl.now);
  AttentionParams p = params(c);
  const Tensor q = arena().dev(DType::F32, {1, 8 * 64});
  Tensor out = arena().dev(DType::F32, {1, 8 * 64});
  p.sinks = arena().dev(DType::F32, {7});  // not [n_head]
  EXPECT_THROW(gpu().attention(p, info(hb, pl.table, pl.max_blocks, true), q, pl.gpu_kv, out), Error);
  p.sinks = arena().dev(DType::BF16, {8});  // not F32
  EXPECT_THROW(gpu().attention(p, info(hb, pl.table, pl.max_blocks, true), q, pl.gpu_kv, out), Error);
  std::vector<float> host(8, 0.0f);
  p.sinks = arena().host_f32(host, {8});  // not on the device
  EXPECT_THROW(gpu().attention(p, info(hb, pl.table, pl.max_blocks, true), q, pl.gpu_kv, out), Error);
}

}  // namespace
}  // namespace ft::testing
