// CUDA moe_experts with gpt-oss's experts (ExpertGlu::kSwigluOai: clamped SwiGLU with alpha and limit,
// per-expert gate/up/down biases) against a naive double-precision reference built from the
// dequantized weights: decode (T = 1..4: the fused gate/up GEMV epilogue, the int8 lane groups with
// their int8 h and fused weighted sum, the unfused launches) and prefill (T >= 64: the grouped GEMM,
// and the per-expert GEMMs for widths it does not take), BF16, Q4_K and MXFP4 weights (and a bank
// whose gate and up differ in dtype: two GEMVs and the GLU kernel), F32 and BF16 activations, skipped
// slots and accumulate. The decode fusions agree bit for bit with the separate launches. Then
// moe_router with the router's logit bias (gpt-oss), fused and unfused, against the CPU's calls.
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/op_harness.h"
#include "util/error.h"

namespace ft::testing {
namespace {

constexpr float kAlpha = 1.702f, kLimit = 7.0f;

class CudaMoeOai : public GpuTest {
 protected:
  /** One bank on the GPU (views of stacked weights, device biases) and its dequantized host copy. */
  struct Bank {
    ExpertBank gpu;
    int64_t E = 0, H = 0, F = 0;
    std::vector<std::vector<float>> gate, up, down;  // per expert, dequantized
    std::vector<float> bg, bu, bd;                   // [E, F], [E, F], [E, H]; empty: none
  };

  void stack(DType dt, int64_t E, int64_t rows, int64_t cols, uint32_t seed, std::vector<Tensor>& views,
             std::vector<std::vector<float>>& deq) {
    const auto w = random_weight(dt, E * rows, cols, seed);
    Tensor d = arena().dev_bytes(w, dt, {E, rows, cols});
    const int64_t bytes = dtype_bytes(dt, rows * cols);
    for (int64_t e = 0; e < E; ++e) {
      views.push_back(d.index(e));
      std::vector<float> f(static_cast<size_t>(rows * cols));
      dequantize_row(dt, w.data() + e * bytes, f.data(), rows * cols);
      deq.push_back(std::move(f));
    }
  }

  Bank make_bank(DType gate, DType up, DType down, int64_t E, int64_t H, int64_t F, uint32_t seed,
                 bool biases = true, ExpertGlu glu = ExpertGlu::kSwigluOai) {
    Bank b;
    b.E = E, b.H = H, b.F = F;
    stack(gate, E, F, H, seed, b.gpu.gate, b.gate);
    stack(up, E, F, H, seed + 1, b.gpu.up, b.up);
    stack(down, E, H, F, seed + 2, b.gpu.down, b.down);
    b.gpu.glu = glu, b.gpu.glu_alpha = kAlpha, b.gpu.glu_limit = kLimit;
    if (biases) {
      b.bg = rand_bf16(static_cast<size_t>(E * F), seed + 3, -2.0f, 2.0f);
      b.bu = rand_bf16(static_cast<size_t>(E * F), seed + 4, -2.0f, 2.0f);
      b.bd = rand_bf16(static_cast<size_t>(E * H), seed + 5, -0.5f, 0.5f);
      b.gpu.gate_bias = arena().dev_from(b.bg, DType::F32, {E, F});
      b.gpu.up_bias = arena().dev_from(b.bu, DType::F32, {E, F});
      b.gpu.down_bias = arena().dev_from(b.bd, DType::F32, {E, H});
    }
    return b;
  }

  /** out = init (accumulate) + sum_j w[t, j] * expert_{ids[t, j]}(x[t]), ids < 0 skipped. */
  static std::vector<float> reference(const Bank& b, const std::vector<float>& x, const std::vector<int32_t>& ids,
                                      const std::vector<float>& w, int64_t T, int32_t k, bool accumulate,
                                      const std::vector<float>& init) {
    const int64_t H = b.H, F = b.F;
    const bool oai = b.gpu.glu == ExpertGlu::kSwigluOai;
    std::vector<double> out(static_cast<size_t>(T * H), 0.0);
    if (accumulate)
      for (size_t i = 0; i < out.size(); ++i) out[i] = init[i];
    std::vector<double> h(static_cast<size_t>(F));
    for (int64_t t = 0; t < T; ++t) {
      const float* xt = x.data() + t * H;
      for (int32_t j = 0; j < k; ++j) {
        const int32_t e = ids[static_cast<size_t>(t * k + j)];
        if (e < 0) continue;
        const float* G = b.gate[static_cast<size_t>(e)].data();
        const float* U = b.up[static_cast<size_t>(e)].data();
        const float* D = b.down[static_cast<size_t>(e)].data();
        for (int64_t f = 0; f < F; ++f) {
          double g = 0, u = 0;
          for (int64_t i = 0; i < H; ++i) g += static_cast<double>(G[f * H + i]) * xt[i], u += static_cast<double>(U[f * H + i]) * xt[i];
          if (!b.bg.empty()) g += b.bg[static_cast<size_t>(e * F + f)];
          if (!b.bu.empty()) u += b.bu[static_cast<size_t>(e * F + f)];
          if (oai) {
            g = std::min<double>(g, kLimit);
            u = std::clamp<double>(u, -kLimit, kLimit);
            h[static_cast<size_t>(f)] = (u + 1.0) * g / (1.0 + std::exp(-static_cast<double>(kAlpha) * g));
          } else {
            h[static_cast<size_t>(f)] = g / (1.0 + std::exp(-g)) * u;
          }
        }
        const double wt = w[static_cast<size_t>(t * k + j)];
        for (int64_t n = 0; n < H; ++n) {
          double y = b.bd.empty() ? 0.0 : b.bd[static_cast<size_t>(e * H + n)];
          for (int64_t f = 0; f < F; ++f) y += static_cast<double>(D[n * F + f]) * h[static_cast<size_t>(f)];
          out[static_cast<size_t>(t * H + n)] += wt * y;
        }
      }
    }
    return std::vector<float>(out.begin(), out.end());
  }

  /** rel L2 of CUDA moe_experts against the reference on random routes (one skipped slot every third
   *  token); the CUDA output in *got when given. */
  double run(const Bank& b, int64_t T, int32_t k, bool accumulate, uint32_t seed, DType act,
             std::vector<float>* got = nullptr) {
    const int64_t H = b.H, E = b.E;
    const auto x = rand_bf16(static_cast<size_t>(T * H), seed);
    const auto w = rand_bf16(static_cast<size_t>(T * k), seed + 1, 0.1f, 1.0f);
    std::mt19937 rng(seed + 2);
    std::vector<int32_t> ids(static_cast<size_t>(T * k)), perm(static_cast<size_t>(E));
    for (int64_t t = 0; t < T; ++t) {
      std::iota(perm.begin(), perm.end(), 0);
      std::shuffle(perm.begin(), perm.end(), rng);
      for (int32_t j = 0; j < k; ++j) ids[static_cast<size_t>(t * k + j)] = perm[static_cast<size_t>(j % E)];
      if (t % 3 == 1) ids[static_cast<size_t>(t * k + (t % k))] = -1;  // computed elsewhere
    }
    const auto init = rand_bf16(static_cast<size_t>(T * H), seed + 3);
    const std::vector<float> ref = reference(b, x, ids, w, T, k, accumulate, init);
    MoeExpertsParams p;
    p.accumulate = accumulate;
    Tensor out = accumulate ? arena().dev_from(init, act, {T, H}) : arena().dev_poisoned(act, {T, H});
    gpu().moe_experts(p, arena().dev_from(x, act, {T, H}), arena().dev_i32(ids, {T, k}),
                      arena().dev_from(w, DType::F32, {T, k}), b.gpu, out);
    if (got) *got = arena().read(out);
    return compare(out, ref);
  }
};

std::string dtypes(DType g, DType u, DType d) {
  return std::string(dtype_name(g)) + "/" + dtype_name(u) + "/" + dtype_name(d);
}

TEST_F(CudaMoeOai, DecodeAndPrefillMatchTheReference) {
  struct Case {
    DType gate, up, down;
    int64_t F;
  };
  const Case cases[] = {
      {DType::BF16, DType::BF16, DType::BF16, 512},
      {DType::Q4_K, DType::Q4_K, DType::Q4_K, 512},   // int8 lane groups: int8 h, fused weighted sum
      {DType::Q4_K, DType::Q4_K, DType::Q6_K, 512},
      {DType::MXFP4, DType::MXFP4, DType::MXFP4, 512},
      {DType::MXFP4, DType::MXFP4, DType::MXFP4, 96},  // prefill: per-expert GEMMs (96 is not whole 64-column tiles)
      {DType::BF16, DType::BF16, DType::BF16, 96},
      {DType::Q4_K, DType::BF16, DType::MXFP4, 512},  // gate and up differ: two GEMVs / GEMMs and the GLU kernel
  };
  const int64_t E = 16, H = 256;
  const int32_t k = 4;
  uint32_t seed = 1;
  for (const Case& c : cases) {
    const Bank b = make_bank(c.gate, c.up, c.down, E, H, c.F, seed += 10);
    for (const DType act : {DType::F32, DType::BF16}) {
      for (int64_t T : {1, 2, 3, 4, 64, 130}) {
        const bool acc = T == 3 || T == 130;
        const double e = run(b, T, k, acc, seed += 5, act);
        const std::string what = dtypes(c.gate, c.up, c.down) + " F=" + std::to_string(c.F) + " " + dtype_name(act) +
                                 " T=" + std::to_string(T) + (T <= 32 ? " decode" : " prefill") + (acc ? " +=" : "");
        report("moe_experts oai", what, e);
        EXPECT_LE(e, kTol) << what;
      }
    }
  }
}

// Each part alone: the clamped GLU without biases, biases with plain SwiGLU, and only some biases.
TEST_F(CudaMoeOai, GluAndBiasesSeparately) {
  const int64_t E = 8, H = 256, F = 256;
  uint32_t seed = 300;
  for (const DType wt : {DType::BF16, DType::Q4_K, DType::MXFP4}) {
    for (int variant = 0; variant < 3; ++variant) {
      Bank b = make_bank(wt, wt, wt, E, H, F, seed += 10, variant != 0,
                         variant == 1 ? ExpertGlu::kSwiglu : ExpertGlu::kSwigluOai);
      if (variant == 2) {  // the down bias alone
        b.bg.clear(), b.bu.clear();
        b.gpu.gate_bias = Tensor(), b.gpu.up_bias = Tensor();
      }
      static const char* names[] = {"oai, no biases", "swiglu + biases", "oai + down bias only"};
      for (int64_t T : {1, 4, 70}) {
        const double e = run(b, T, 4, false, seed += 3, DType::F32);
        const std::string what = std::string(dtype_name(wt)) + " " + names[variant] + " T=" + std::to_string(T);
        report("moe_experts oai", what, e);
        EXPECT_LE(e, kTol) << what;
      }
    }
  }
}

// The decode fusions (int8 h from the gate/up GEMV, the weighted sum in the down GEMV, set_cuda_moe_fusion)
// add the biases and apply the GLU as the separate launches do: the same bits.
TEST_F(CudaMoeOai, FusedDecodeEqualsSeparateLaunchesBitForBit) {
  struct Case {
    DType gate, up, down, act;
  };
  const Case cases[] = {{DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::BF16},
                        {DType::Q8_0, DType::Q8_0, DType::Q4_K, DType::F32},
                        {DType::BF16, DType::BF16, DType::BF16, DType::F32},
                        {DType::MXFP4, DType::MXFP4, DType::MXFP4, DType::BF16}};
  const int64_t E = 24, H = 512, F = 256;
  uint32_t seed = 700;
  for (const Case& c : cases) {
    const Bank b = make_bank(c.gate, c.up, c.down, E, H, F, seed += 10);
    for (int32_t k : {1, 4, 16}) {
      for (int64_t T : {1, 3}) {
        std::vector<float> fused, separate;
        set_cuda_moe_fusion(false);
        const double e0 = run(b, T, k, T == 3, seed, c.act, &separate);
        set_cuda_moe_fusion(true);
        const double e1 = run(b, T, k, T == 3, seed, c.act, &fused);
        const std::string what = dtypes(c.gate, c.up, c.down) + " " + dtype_name(c.act) + " k=" + std::to_string(k) +
                                 " T=" + std::to_string(T);
        EXPECT_LE(e0, kTol) << what;
        EXPECT_LE(e1, kTol) << what;
        ASSERT_EQ(fused.size(), separate.size());
        EXPECT_EQ(std::memcmp(fused.data(), separate.data(), fused.size() * sizeof(float)), 0) << what;
        seed += 3;
      }
    }
  }
}

TEST_F(CudaMoeOai, RejectsBadBiases) {
  const int64_t E = 4, H = 64, F = 64;
  const Tensor x = arena().dev(DType::F32, {1, H});
  const Tensor ids = arena().dev_i32({0, 1}, {1, 2}), w = arena().dev_from({0.5f, 0.5f}, DType::F32, {1, 2});
  Tensor out = arena().dev(DType::F32, {1, H});
  auto expect_throw = [&](const Bank& b, const char* what) {
    EXPECT_THROW(gpu().moe_experts({}, x, ids, w, b.gpu, out), Error) << what;
  };
  {
    Bank b = make_bank(DType::BF16, DType::BF16, DType::BF16, E, H, F, 5);
    b.gpu.gate_bias = arena().dev(DType::F32, {E, F + 1});
    expect_throw(b, "gate_bias of the wrong width");
  }
  {
    Bank b = make_bank(DType::BF16, DType::BF16, DType::BF16, E, H, F, 6);
    b.gpu.down_bias = arena().dev(DType::BF16, {E, H});
    expect_throw(b, "down_bias not F32");
  }
  {
    Bank b = make_bank(DType::BF16, DType::BF16, DType::BF16, E, H, F, 7);
    b.gpu.up_bias = arena().host_f32(std::vector<float>(static_cast<size_t>(E * F)), {E, F});
    expect_throw(b, "up_bias on the host");
  }
  {
    Bank b = make_bank(DType::BF16, DType::BF16, DType::BF16, E, H, F, 8, false);
    b.gpu.glu_limit = 0.0f;
    expect_throw(b, "clamped SwiGLU without a limit");
  }
}

// moe_router with the router's logit bias: the fused kernel (up to 16 tokens) adds it to each logit as
// matmul adds its bias, so logits and ids equal the CPU's matmul(+ bias), moe_route and moe_mask_rows.
// x, w and the bias are small multiples of powers of two (every logit exact in fp32 in any order).
TEST_F(CudaMoeOai, RouterWithLogitBias) {
  struct Case {
    int64_t T, H, E;
    int32_t k;
    DType x_dt, w_dt, bias_dt;
    int32_t n_valid;  // -1: no mask
  };
  const Case cases[] = {{1, 2880, 32, 4, DType::F32, DType::BF16, DType::F32, -1},   // gpt-oss-20b
                        {4, 2880, 128, 4, DType::F32, DType::BF16, DType::BF16, 3},  // gpt-oss-120b
                        {16, 256, 128, 4, DType::BF16, DType::BF16, DType::F32, 9},
                        {20, 256, 32, 4, DType::F32, DType::F32, DType::F32, 17}};  // 20 > 16: unfused
  uint32_t seed = 90;
  for (const Case& c : cases) {
    std::vector<float> x(static_cast<size_t>(c.T * c.H)), w(static_cast<size_t>(c.E * c.H)), bias(static_cast<size_t>(c.E));
    uint32_t r = seed++;
    for (float& v : x) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 28) - 8) / 4.0f;
    for (float& v : w) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 27) - 16) / 16.0f;
    for (float& v : bias) v = static_cast<float>(static_cast<int>((r = r * 1664525u + 1013904223u) >> 26) - 32) / 8.0f;
    RouterParams p;
    p.n_expert_used = c.k, p.scoring = RouterScoring::kSoftmax, p.norm_topk_prob = true;  // gpt-oss: softmax of the top k
    std::vector<float> ref_logits(static_cast<size_t>(c.T * c.E));
    std::vector<int32_t> ref_ids(static_cast<size_t>(c.T * c.k));
    std::vector<float> ref_w(ref_ids.size());
    cpu().matmul(arena().host_f32(x, {c.T, c.H}), arena().host_f32(w, {c.E, c.H}),
                 Tensor(ref_logits.data(), DType::F32, {c.T, c.E}), arena().host_f32(bias, {c.E}));
    if (c.x_dt == DType::BF16) ref_logits = round_bf16(ref_logits);
    cpu().moe_route(p, arena().host_f32(ref_logits, {c.T, c.E}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}),
                    Tensor(ref_w.data(), DType::F32, {c.T, c.k}));
    if (c.n_valid >= 0)
      cpu().moe_mask_rows(arena().host_i32({c.n_valid}, {1}), Tensor(ref_ids.data(), DType::I32, {c.T, c.k}));
    Tensor logits = arena().dev_poisoned(c.x_dt, {c.T, c.E});
    Tensor ids = arena().dev_poisoned(DType::I32, {c.T, c.k}), wt = arena().dev_poisoned(DType::F32, {c.T, c.k});
    const std::string what = "T=" + std::to_string(c.T) + " E=" + std::to_string(c.E) + " bias " + dtype_name(c.bias_dt);
    for (int rep = 0; rep < 2; ++rep) {  // twice: the per-token counters must be back at zero
      gpu().moe_router(p, arena().dev_from(x, c.x_dt, {c.T, c.H}), arena().dev_from(w, c.w_dt, {c.E, c.H}),
                       arena().dev_from(bias, c.bias_dt, {c.E}), logits, ids, wt,
                       c.n_valid >= 0 ? arena().dev_i32({c.n_valid}, {1}) : Tensor());
      EXPECT_EQ(arena().read_i32(ids), ref_ids) << what << " rep " << rep;
      EXPECT_LE(compare(logits, ref_logits), 1e-6) << what;
      const double e = compare(wt, ref_w);
      report("moe_router bias", what + " ids exact", e);
      EXPECT_LE(e, 1e-5) << what;
    }
  }
  // A bias of the wrong length is refused.
  RouterParams p;
  p.n_expert_used = 4;
  Tensor logits = arena().dev(DType::F32, {1, 32}), ids = arena().dev(DType::I32, {1, 4}), wt = arena().dev(DType::F32, {1, 4});
  EXPECT_THROW(gpu().moe_router(p, arena().dev(DType::F32, {1, 256}), arena().dev(DType::F32, {32, 256}),
                                arena().dev(DType::F32, {31}), logits, ids, wt, Tensor()),
               Error);
}

}  // namespace
}  // namespace ft::testing
