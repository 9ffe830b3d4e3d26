// CUDA vs CPU: ssm_conv, gated_delta_rule and sigmoid_mul (Gated DeltaNet) on a mixed batch (a
// fresh prefill, a continued chunk, decode tokens) with Qwen3-Next's head sizes, then a run of
// single-token steps carrying the state; states and outputs within 1e-2 relative L2. Then a long
// mixed batch (the chunked prefill kernels, across a slab of chunks) in F32 within 1e-4 and in BF16.
#include "backend/op_harness.h"

namespace ft::testing {
namespace {

class CudaLinearAttention : public GpuBatchTest {
 protected:
  BatchInfo with_slots(BatchInfo b, const std::vector<int32_t>& slots, bool on_gpu) {
    const auto S = static_cast<int64_t>(slots.size());
    b.state_slots = on_gpu ? arena().dev_i32(slots, {S}) : arena().host_i32(slots, {S});
    return b;
  }
  /** GatedDeltaParams of these heads with random A_log (from `seed`) and dt_bias (`seed` + 1): the
   *  CPU's copy, then the GPU's. */
  std::pair<GatedDeltaParams, GatedDeltaParams> delta_params(int64_t Hk, int64_t Hv, int64_t dk, int64_t dv,
                                                             bool tiled, uint32_t seed) {
    GatedDeltaParams p;
    p.n_k_heads = static_cast<int32_t>(Hk), p.n_v_heads = static_cast<int32_t>(Hv);
    p.k_head_dim = static_cast<int32_t>(dk), p.v_head_dim = static_cast<int32_t>(dv), p.v_tiled = tiled;
    const auto a_log = rand_bf16(Hv, seed, -1, 1.5f), dt = rand_bf16(Hv, seed + 1, -0.5f, 0.5f);
    GatedDeltaParams cp = p, gp = p;
    cp.a_log = arena().host_f32(a_log, {Hv}), cp.dt_bias = arena().host_f32(dt, {Hv});
    gp.a_log = arena().dev_from(a_log, DType::F32, {Hv}), gp.dt_bias = arena().dev_from(dt, DType::F32, {Hv});
    return {cp, gp};
  }
};

TEST_F(CudaLinearAttention, ConvAndDeltaRuleTrackCpu) {
  const int64_t Hk = 2, Hv = 4, dk = 128, dv = 128, K = 4, slots = 5;
  const int64_t C = 2 * Hk * dk + Hv * dv;
  // Sequence 0: positions 0..37 (fresh, slot 3); 1: positions 20..28 (slot 1); 2 and 3: one decode token.
  const HostBatch hb = make({{0, 38}, {20, 9}, {50, 1}, {7, 1}});
  const std::vector<int32_t> slot_ids = {3, 1, 0, 4};
  const int64_t T = hb.T;
  const auto [cp, gp] = delta_params(Hk, Hv, dk, dv, false, 1);
  const auto w = rand_bf16(C * K, 3, -0.5f, 0.5f);
  const auto conv0 = rand_bf16(slots * (K - 1) * C, 4), ssm0 = rand_bf16(slots * Hv * dk * dv, 5, -0.2f, 0.2f);
  const auto x = rand_bf16(T * C, 6, -2, 2), a = rand_bf16(T * Hv, 7, -2, 2), b = rand_bf16(T * Hv, 8, -2, 2);
  const std::vector<int32_t> table(static_cast<size_t>(hb.S), 0);
  const BatchInfo cb = with_slots(info(hb, table, 1, false), slot_ids, false);
  const BatchInfo gb = with_slots(info(hb, table, 1, true), slot_ids, true);

  Tensor c_conv = arena().host_f32(conv0, {slots, K - 1, C}), g_conv = arena().dev_from(conv0, DType::F32, {slots, K - 1, C});
  std::vector<float> c_xc(static_cast<size_t>(T * C));
  cpu().ssm_conv(cb, arena().host_f32(x, {T, C}), arena().host_f32(w, {C, K}), c_conv, Tensor(c_xc.data(), DType::F32, {T, C}));
  Tensor g_xc = arena().dev_poisoned(DType::BF16, {T, C});
  gpu().ssm_conv(gb, arena().dev_from(x, DType::BF16, {T, C}), arena().dev_from(w, DType::F32, {C, K}), g_conv, g_xc);
  double e = compare(g_xc, c_xc);
  report("ssm_conv", "out", e);
  EXPECT_LE(e, kTol);
  e = compare(g_conv, std::vector<float>(c_conv.ptr<float>(), c_conv.ptr<float>() + c_conv.numel()));
  report("ssm_conv", "state", e);
  EXPECT_LE(e, 1e-2);

  // The delta rule reads the CPU's conv output (rounded to bf16) on both sides.
  const std::vector<float> xc = round_bf16(c_xc);
  Tensor c_ssm = arena().host_f32(ssm0, {slots, Hv, dk, dv}), g_ssm = arena().dev_from(ssm0, DType::F32, {slots, Hv, dk, dv});
  std::vector<float> c_out(static_cast<size_t>(T * Hv * dv));
  cpu().gated_delta_rule(cp, cb, arena().host_f32(xc, {T, C}), arena().host_f32(a, {T, Hv}), arena().host_f32(b, {T, Hv}),
                         c_ssm, Tensor(c_out.data(), DType::F32, {T, Hv * dv}));
  Tensor g_out = arena().dev_poisoned(DType::BF16, {T, Hv * dv});
  gpu().gated_delta_rule(gp, gb, arena().dev_from(xc, DType::BF16, {T, C}), arena().dev_from(a, DType::BF16, {T, Hv}),
                         arena().dev_from(b, DType::BF16, {T, Hv}), g_ssm, g_out);
  e = compare(g_out, c_out);
  report("gated_delta_rule", "out 4 seqs", e);
  EXPECT_LE(e, kTol);
  e = compare(g_ssm, std::vector<float>(c_ssm.ptr<float>(), c_ssm.ptr<float>() + c_ssm.numel()));
  report("gated_delta_rule", "state", e);
  EXPECT_LE(e, kTol);

  // Eight more single-token steps of sequence 0 (decode), carrying the state on both sides.
  for (int32_t step = 0; step < 8; ++step) {
    const HostBatch d = make({{38 + step, 1}});
    const BatchInfo cd = with_slots(info(d, {0}, 1, false), {3}, false), gd = with_slots(info(d, {0}, 1, true), {3}, true);
    const auto xs = rand_bf16(C, 100 + step), as = rand_bf16(Hv, 200 + step), bs = rand_bf16(Hv, 300 + step);
    std::vector<float> co(static_cast<size_t>(Hv * dv));
    cpu().gated_delta_rule(cp, cd, arena().host_f32(xs, {1, C}), arena().host_f32(as, {1, Hv}), arena().host_f32(bs, {1, Hv}),
                           c_ssm, Tensor(co.data(), DType::F32, {1, Hv * dv}));
    Tensor go = arena().dev_poisoned(DType::BF16, {1, Hv * dv});
    gpu().gated_delta_rule(gp, gd, arena().dev_from(xs, DType::BF16, {1, C}), arena().dev_from(as, DType::BF16, {1, Hv}),
                           arena().dev_from(bs, DType::BF16, {1, Hv}), g_ssm, go);
    e = compare(go, co);
    EXPECT_LE(e, kTol) << "decode step " << step;
  }
  report("gated_delta_rule", "8 decode steps", e);
}

// Batches of at least 128 rows take the chunked form (gated_delta_chunked.cu): a fresh 2300-row
// prefill (36 chunks, more than one slab of 32), a continued sequence, a decode row, an exact chunk
// and a short continuation, with both head layouts; the conv's row tiles cross sequences too.
TEST_F(CudaLinearAttention, ChunkedPrefillTracksCpu) {
  struct Shape { int64_t Hk, Hv, dk, dv; bool tiled; };
  for (const Shape sh : {Shape{2, 4, 128, 128, false}, Shape{1, 2, 64, 48, true}}) {
    for (const DType act : {DType::F32, DType::BF16}) {
      const int64_t Hk = sh.Hk, Hv = sh.Hv, dk = sh.dk, dv = sh.dv, K = 4, slots = 5;
      const int64_t C = 2 * Hk * dk + Hv * dv;
      const HostBatch hb = make({{0, 2300}, {100, 131}, {5, 1}, {0, 64}, {40, 7}});
      const std::vector<int32_t> slot_ids = {2, 0, 4, 1, 3};
      const int64_t T = hb.T;
      const std::string tag = std::string(act == DType::F32 ? "f32" : "bf16") + (sh.tiled ? " tiled" : "");
      const auto [cp, gp] = delta_params(Hk, Hv, dk, dv, sh.tiled, 11);
      const auto w = rand_bf16(C * K, 13, -0.5f, 0.5f);
      const auto conv0 = rand_bf16(slots * (K - 1) * C, 14), ssm0 = rand_bf16(slots * Hv * dk * dv, 15, -0.2f, 0.2f);
      const auto x = rand_bf16(T * C, 16, -2, 2), a = rand_bf16(T * Hv, 17, -3, 3), b = rand_bf16(T * Hv, 18, -2, 2);
      const std::vector<int32_t> table(static_cast<size_t>(hb.S), 0);
      const BatchInfo cb = with_slots(info(hb, table, 1, false), slot_ids, false);
      const BatchInfo gb = with_slots(info(hb, table, 1, true), slot_ids, true);
      const double tol = act == DType::F32 ? 1e-4 : kTol;

      Tensor c_conv = arena().host_f32(conv0, {slots, K - 1, C});
      Tensor g_conv = arena().dev_from(conv0, DType::F32, {slots, K - 1, C});
      std::vector<float> c_xc(static_cast<size_t>(T * C));
      cpu().ssm_conv(cb, arena().host_f32(x, {T, C}), arena().host_f32(w, {C, K}), c_conv,
                     Tensor(c_xc.data(), DType::F32, {T, C}));
      Tensor g_xc = arena().dev_poisoned(act, {T, C});
      gpu().ssm_conv(gb, arena().dev_from(x, act, {T, C}), arena().dev_from(w, DType::F32, {C, K}), g_conv, g_xc);
      double e = compare(g_xc, c_xc);
      report("ssm_conv " + tag, "out, 2503 rows", e);
      EXPECT_LE(e, tol) << tag;
      e = compare(g_conv, std::vector<float>(c_conv.ptr<float>(), c_conv.ptr<float>() + c_conv.numel()));
      EXPECT_LE(e, act == DType::F32 ? 1e-6 : 1e-2) << tag;

      const std::vector<float> xc = act == DType::F32 ? c_xc : round_bf16(c_xc);
      Tensor c_ssm = arena().host_f32(ssm0, {slots, Hv, dk, dv});
      Tensor g_ssm = arena().dev_from(ssm0, DType::F32, {slots, Hv, dk, dv});
      std::vector<float> c_out(static_cast<size_t>(T * Hv * dv));
      cpu().gated_delta_rule(cp, cb, arena().host_f32(xc, {T, C}), arena().host_f32(a, {T, Hv}),
                             arena().host_f32(b, {T, Hv}), c_ssm, Tensor(c_out.data(), DType::F32, {T, Hv * dv}));
      Tensor g_out = arena().dev_poisoned(act, {T, Hv * dv});
      gpu().gated_delta_rule(gp, gb, arena().dev_from(xc, act, {T, C}), arena().dev_from(a, DType::F32, {T, Hv}),
                             arena().dev_from(b, DType::F32, {T, Hv}), g_ssm, g_out);
      e = compare(g_out, c_out);
      report("gated_delta_rule chunked " + tag, "out, 5 seqs", e);
      EXPECT_LE(e, tol) << tag;
      e = compare(g_ssm, std::vector<float>(c_ssm.ptr<float>(), c_ssm.ptr<float>() + c_ssm.numel()));
      report("gated_delta_rule chunked " + tag, "state", e);
      EXPECT_LE(e, tol) << tag;
    }
  }
}

TEST_F(CudaLinearAttention, SigmoidMul) {
  const auto g = rand_bf16(7 * 300, 1, -4, 4), x = rand_bf16(7 * 300, 2);
  std::vector<float> ref(g.size());
  cpu().sigmoid_mul(arena().host_f32(g, {7, 300}), arena().host_f32(x, {7, 300}), Tensor(ref.data(), DType::F32, {7, 300}));
  Tensor out = arena().dev_poisoned(DType::BF16, {7, 300});
  gpu().sigmoid_mul(arena().dev_from(g, DType::BF16, {7, 300}), arena().dev_from(x, DType::BF16, {7, 300}), out);
  const double e = compare(out, ref);
  report("sigmoid_mul", "[7, 300]", e);
  EXPECT_LE(e, kTol);
}

}  // namespace
}  // namespace ft::testing
