// The int8 activation a kernel writes for the integer-dot GEMV besides its own output
// (CudaOps::prepare_q8 / prepared_q8): add_rms_norm and rms_norm write their output's for decode
// batches, and the fused router its input's when no producer did; the GEMVs that read the activation
// next (qkv, the experts, the shared expert, the LM head) skip their quantize launch. A product through the
// prepared form must equal one through the quantize launch, bit for bit, and any op that may write
// the activation in between must make the readers quantize again. The decode attention's form of
// its output is checked in attention_test.
#include "gpu_harness.h"

namespace ft::testing {
namespace {

using CudaPreparedQ8 = GpuTest;

const RouterParams kRouter{2, RouterScoring::kSoftmax, true, 1.0f};

TEST_F(CudaPreparedQ8, RouterWritesItsInputsInt8Form) {
  const int64_t H = 2048;
  uint32_t seed = 100;
  for (DType act : {DType::F32, DType::BF16}) {
    for (int64_t E : {128, 8}) {  // more blocks than x has chunks, and fewer
      for (int64_t T : {1, 3, 16, 17}) {
        const std::string what = std::string(dtype_name(act)) + " E=" + std::to_string(E) + " T=" + std::to_string(T);
        const bool fused = T <= 16;  // the fused router's batches
        Tensor x = arena().dev_from(rand_bf16(static_cast<size_t>(T * H), seed++), act, {T, H});
        Tensor w = arena().dev_from(rand_bf16(static_cast<size_t>(E * H), seed++), DType::F32, {E, H});
        Tensor logits = arena().dev(act, {T, E}), ids = arena().dev(DType::I32, {T, 2});
        Tensor weights = arena().dev(DType::F32, {T, 2});

        Q8Probe pr = q8_probe(x);
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor());
        expect_q8_probe(pr, x, fused, what);

        pr = q8_probe(x);
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor());
        gpu().matmul(x, pr.w, pr.y, Tensor());
        gpu().matmul(x, pr.w, pr.y, Tensor());
        EXPECT_EQ(prepared_q8(x), fused) << what << ": a reader keeps the prepared form";
        if (T > 1) {
          EXPECT_FALSE(prepared_q8(x.slice(0, T - 1))) << what << ": only the whole activation is prepared";
        }
        expect_q8_probe(pr, x, fused, what + " after readers");

        // An op writing x in between: the GEMV quantizes the new values.
        pr = q8_probe(x);
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor());
        gpu().scale(x, -2.0f, x);
        expect_q8_probe(pr, x, false, what + " then scale");
      }
    }
  }
}

TEST_F(CudaPreparedQ8, NormsWriteTheirOutputsInt8Form) {
  // add_rms_norm and rms_norm of decode batches (a cluster of blocks per row) write out's int8 form;
  // x and out equal the one-block-per-row kernel's bit for bit (rows of a 20-row batch, which takes it).
  const RmsNormParams np{1e-6f, 0.0f};
  uint32_t seed = 300;
  for (DType act : {DType::F32, DType::BF16}) {
    for (int64_t D : {2048, 768, 4160}) {
      for (int64_t T : {1, 5, 16}) {
        const std::string what = std::string(dtype_name(act)) + " D=" + std::to_string(D) + " T=" + std::to_string(T);
        const int64_t T_ref = 20;
        const auto xv = rand_bf16(static_cast<size_t>(T_ref * D), seed++, -2.0f, 2.0f);
        const auto rv = rand_bf16(static_cast<size_t>(T_ref * D), seed++);
        const auto xs = std::vector<float>(xv.begin(), xv.begin() + T * D);
        const auto rs = std::vector<float>(rv.begin(), rv.begin() + T * D);
        Tensor nw = arena().dev_from(rand_bf16(static_cast<size_t>(D), seed++, 0.5f, 1.5f), DType::F32, {D});
        Tensor x = arena().dev_from(xs, act, {T, D}), r = arena().dev_from(rs, act, {T, D});
        Tensor x_ref = arena().dev_from(xv, act, {T_ref, D}), r_ref = arena().dev_from(rv, act, {T_ref, D});
        Tensor h = arena().dev_poisoned(act, {T, D}), h_ref = arena().dev_poisoned(act, {T_ref, D});
        gpu().add_rms_norm(np, x_ref, r_ref, nw, h_ref);

        Q8Probe pr = q8_probe(h);
        gpu().add_rms_norm(np, x, r, nw, h);
        expect_q8_probe(pr, h, true, what + " add_rms_norm");
        EXPECT_TRUE(same_bits(h, h_ref.slice(0, T))) << what << ": out differs from the row kernel's";
        EXPECT_TRUE(same_bits(x, x_ref.slice(0, T))) << what << ": x += r differs from the row kernel's";

        gpu().rms_norm(np, x_ref, nw, h_ref);
        pr = q8_probe(h);
        gpu().rms_norm(np, x, nw, h);
        expect_q8_probe(pr, h, true, what + " rms_norm");
        EXPECT_TRUE(same_bits(h, h_ref.slice(0, T))) << what << ": rms_norm out differs from the row kernel's";

        pr = q8_probe(x);
        gpu().rms_norm(np, x, nw, x);  // in place: every block reads the row before any writes it
        expect_q8_probe(pr, x, true, what + " rms_norm in place");
        EXPECT_TRUE(same_bits(x, h)) << what << ": rms_norm in place differs";
      }
    }
  }
}

TEST_F(CudaPreparedQ8, MoeExpertsAfterTheRouterEqualQuantizeLaunch) {
  const int64_t E = 8, H = 512, F = 256, T = 2;
  const int32_t k = 2;
  ExpertBank bank;
  const DType dts[3] = {DType::Q4_K, DType::Q4_K, DType::Q6_K};
  std::vector<Tensor>* parts[3] = {&bank.gate, &bank.up, &bank.down};
  for (int j = 0; j < 3; ++j) {
    const int64_t rows = j == 2 ? H : F, cols = j == 2 ? F : H;
    Tensor d = arena().dev_bytes(random_weight(dts[j], E * rows, cols, 20 + j), dts[j], {E, rows, cols});
    for (int64_t e = 0; e < E; ++e) parts[j]->push_back(d.index(e));
  }
  for (DType act : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(act));
    Tensor x = arena().dev_from(rand_bf16(static_cast<size_t>(T * H), 31), act, {T, H});
    Tensor r = arena().dev_from(rand_bf16(static_cast<size_t>(T * H), 32), act, {T, H});
    Tensor nw = arena().dev_from(rand_bf16(static_cast<size_t>(H), 33, 0.5f, 1.5f), DType::F32, {H});
    Tensor router_w = arena().dev_from(rand_bf16(static_cast<size_t>(E * H), 34), DType::F32, {E, H});
    Tensor h = arena().dev(act, {T, H}), logits = arena().dev(act, {T, E});
    Tensor ids = arena().dev(DType::I32, {T, k}), wts = arena().dev(DType::F32, {T, k});
    Tensor out = arena().dev_poisoned(act, {T, H}), out_ref = arena().dev_poisoned(act, {T, H});
    gpu().moe_router(kRouter, x, router_w, Tensor(), logits, ids, wts, Tensor());
    gpu().moe_experts({}, x, ids, wts, bank, out);  // an integer-dot GEMV has run
    gpu().add_rms_norm({1e-6f, 0.0f}, x, r, nw, h);
    EXPECT_TRUE(prepared_q8(h));  // written by the norm; the router keeps it
    gpu().moe_router(kRouter, h, router_w, Tensor(), logits, ids, wts, Tensor());
    EXPECT_TRUE(prepared_q8(h));
    gpu().moe_experts({}, h, ids, wts, bank, out);
    gpu().moe_experts({}, clone(h), ids, wts, bank, out_ref);
    EXPECT_TRUE(same_bits(out, out_ref));
    EXPECT_EQ(count_nonfinite(arena().read(out)), 0u);
  }
}

}  // namespace
}  // namespace ft::testing
