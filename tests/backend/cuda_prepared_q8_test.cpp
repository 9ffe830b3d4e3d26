// The int8 activation a kernel writes for the integer-dot GEMV besides its own output, handed on
// explicitly (ActQ8, backend/ops.h; CudaOps::prepare_q8 / handed_q8): add_rms_norm and rms_norm write
// their output's for decode batches when asked, and the fused router its input's when its handle holds
// no valid form; the GEMVs handed it next (qkv, the experts, the shared expert, the LM head) skip their
// quantize launch. The handed form must equal a fresh quantization byte for byte, a product through it
// one through the quantize launch bit for bit, and a stale or foreign handle must be refused (the
// reader quantizes, with the same bits). The decode attention's form of its output is checked in
// tests/backend/cuda_attention_test.cpp.
#include "backend/op_harness.h"

#ifdef FT_HAVE_CUDA  // the tests read CudaOps' handles and regions
namespace ft::testing {
namespace {

const RouterParams kRouter{2, RouterScoring::kSoftmax, true, 1.0f};

class CudaPreparedQ8 : public GpuTest {
 protected:
  CudaOps& cuda() { return static_cast<CudaOps&>(gpu()); }

  /** The bytes of the int8 form of a [rows, K] activation at q8 (q8_act.cuh's Q8Layout: q1, q2 int8
   *  [rows, K], then F32 scales and sums [rows, K / 32]; every byte written). */
  std::vector<int32_t> q8_bytes(const void* q8, int64_t rows, int64_t K) {
    const int64_t words = (2 * rows * K + 2 * rows * (K / 32) * 4) / 4;
    std::vector<int32_t> v(static_cast<size_t>(words));
    gpu().copy(Tensor(const_cast<void*>(q8), DType::I32, {words}, Device::kCuda),
               Tensor(v.data(), DType::I32, {words}));
    return v;
  }

  /** The handle h names t's form, and that form equals a fresh quantization of t's values (the
   *  quantize launch of a GEMV over a copy of t, read from its region), byte for byte. */
  void expect_fresh_form(const Q8Probe& pr, const Tensor& t, const ActQ8& h, const std::string& what) {
    ASSERT_TRUE(prepared_q8(t, h)) << what;
    const std::vector<int32_t> handed = q8_bytes(h.data, t.rows(), t.cols());
    gpu().matmul(clone(t), pr.w, pr.y_ref, Tensor());  // quantizes into Scratch::kQ8
    const int64_t bytes = 2 * t.rows() * t.cols() + 2 * t.rows() * (t.cols() / 32) * 4;
    const std::vector<int32_t> fresh = q8_bytes(cuda().scratch(CudaOps::Scratch::kQ8, bytes), t.rows(), t.cols());
    EXPECT_TRUE(handed == fresh) << what << ": the handed int8 form differs from a fresh quantization";
  }

  /** A product of t (at most pr's rows) through handle h, refused or not, equals one of a copy of t
   *  without a handle. */
  void expect_same_product(const Q8Probe& pr, const Tensor& t, const ActQ8& h, const std::string& what) {
    const Tensor y = pr.y.slice(0, t.rows()), y_ref = pr.y_ref.slice(0, t.rows());
    gpu().matmul(t, pr.w, y, Tensor(), &h);
    gpu().matmul(clone(t), pr.w, y_ref, Tensor());
    EXPECT_TRUE(same_bits(y, y_ref)) << what << ": a product through the handle differs";
  }
};

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
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor(), &pr.q8);
        expect_q8_probe(pr, x, fused, what);
        if (fused) expect_fresh_form(pr, x, pr.q8, what);

        // Readers keep the form valid; a second router keeps the handle as it was (writes none).
        pr = q8_probe(x);
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor(), &pr.q8);
        const ActQ8 first = pr.q8;
        gpu().matmul(x, pr.w, pr.y, Tensor(), &pr.q8);
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor(), &pr.q8);
        EXPECT_EQ(pr.q8.generation, first.generation) << what << ": the router rewrote a valid form";
        EXPECT_EQ(prepared_q8(x, pr.q8), fused) << what << ": readers keep the form";
        if (T > 1) {
          EXPECT_FALSE(prepared_q8(x.slice(0, T - 1), pr.q8)) << what << ": only the whole activation is named";
          expect_same_product(pr, x.slice(0, T - 1), pr.q8, what + " slice");
        }
        expect_q8_probe(pr, x, fused, what + " after readers");

        // No handle: the router writes no form.
        const uint64_t gen = cuda().q8_generation();
        gpu().moe_router(kRouter, x, w, Tensor(), logits, ids, weights, Tensor());
        EXPECT_EQ(cuda().q8_generation(), gen) << what << ": a form nobody asked for";
      }
    }
  }
}

TEST_F(CudaPreparedQ8, NormsWriteTheirOutputsInt8Form) {
  // add_rms_norm and rms_norm of decode batches (a cluster of blocks per row) write out's int8 form
  // when asked; x and out equal the one-block-per-row kernel's bit for bit (rows of a 20-row batch,
  // which takes it), with a handle or without.
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
        Tensor x2 = arena().dev_from(xs, act, {T, D});
        Tensor x_ref = arena().dev_from(xv, act, {T_ref, D}), r_ref = arena().dev_from(rv, act, {T_ref, D});
        Tensor h = arena().dev_poisoned(act, {T, D}), h2 = arena().dev_poisoned(act, {T, D});
        Tensor h_ref = arena().dev_poisoned(act, {T_ref, D});
        gpu().add_rms_norm(np, x_ref, r_ref, nw, h_ref);

        Q8Probe pr = q8_probe(h);
        gpu().add_rms_norm(np, x, r, nw, h, &pr.q8);
        expect_q8_probe(pr, h, true, what + " add_rms_norm");
        expect_fresh_form(pr, h, pr.q8, what + " add_rms_norm");
        EXPECT_TRUE(same_bits(h, h_ref.slice(0, T))) << what << ": out differs from the row kernel's";
        EXPECT_TRUE(same_bits(x, x_ref.slice(0, T))) << what << ": x += r differs from the row kernel's";
        gpu().add_rms_norm(np, x2, r, nw, h2);  // no handle: the same values
        EXPECT_TRUE(same_bits(h2, h)) << what << ": add_rms_norm without a handle differs";

        gpu().rms_norm(np, x_ref, nw, h_ref);
        pr = q8_probe(h);
        gpu().rms_norm(np, x, nw, h, &pr.q8);
        expect_q8_probe(pr, h, true, what + " rms_norm");
        expect_fresh_form(pr, h, pr.q8, what + " rms_norm");
        EXPECT_TRUE(same_bits(h, h_ref.slice(0, T))) << what << ": rms_norm out differs from the row kernel's";

        pr = q8_probe(x);
        gpu().rms_norm(np, x, nw, x, &pr.q8);  // in place: every block reads the row before any writes it
        expect_q8_probe(pr, x, true, what + " rms_norm in place");
        EXPECT_TRUE(same_bits(x, h)) << what << ": rms_norm in place differs";
      }
    }
  }
}

TEST_F(CudaPreparedQ8, StaleOrForeignHandlesFallBack) {
  // A handle is used only while it names the same tensor (pointer, dtype, rows, K) at the backend's
  // current generation and its region; otherwise the reader quantizes, with the same bits.
  const RmsNormParams np{1e-6f, 0.0f};
  const int64_t T = 4, D = 1024;
  for (DType act : {DType::F32, DType::BF16}) {
    const std::string what = dtype_name(act);
    Tensor nw = arena().dev_from(rand_bf16(static_cast<size_t>(D), 401, 0.5f, 1.5f), DType::F32, {D});
    Tensor x = arena().dev_from(rand_bf16(static_cast<size_t>(T * D), 402), act, {T, D});
    Tensor x2 = arena().dev_from(rand_bf16(static_cast<size_t>(T * D), 403), act, {T, D});
    Tensor h = arena().dev_poisoned(act, {T, D}), h2 = arena().dev_poisoned(act, {T, D});
    Q8Probe pr = q8_probe(h);
    ActQ8 a, b;
    gpu().rms_norm(np, x, nw, h, &a);
    ASSERT_TRUE(prepared_q8(h, a)) << what;
    gpu().rms_norm(np, x2, nw, h2, &b);  // a later form: a goes stale
    EXPECT_GT(b.generation, a.generation) << what;
    EXPECT_FALSE(prepared_q8(h, a)) << what << ": a stale handle is used";
    expect_same_product(pr, h, a, what + " stale");
    EXPECT_TRUE(prepared_q8(h2, b)) << what;
    EXPECT_FALSE(prepared_q8(h, b)) << what << ": another tensor's handle is used";
    expect_same_product(pr, h, b, what + " another tensor's");
    ActQ8 other_dtype = b;
    other_dtype.dtype = act == DType::F32 ? DType::BF16 : DType::F32;
    EXPECT_FALSE(prepared_q8(h2, other_dtype)) << what << ": a handle of another dtype is used";
    ActQ8 forged = b;  // right tensor and generation, another region (e.g. another backend's)
    forged.data = pr.y.data;
    EXPECT_FALSE(prepared_q8(h2, forged)) << what << ": a handle outside the form's region is used";
    expect_same_product(pr, h2, forged, what + " forged");
    expect_same_product(pr, h2, b, what + " valid");
    const ActQ8 empty;
    EXPECT_FALSE(prepared_q8(h2, empty)) << what;
    expect_same_product(pr, h2, empty, what + " empty");

    // A producer asked but writing none (more than 16 rows) empties the handle.
    const int64_t R = 20;
    Tensor xr = arena().dev_from(rand_bf16(static_cast<size_t>(R * D), 404), act, {R, D});
    Tensor hr = arena().dev_poisoned(act, {R, D});
    ActQ8 c = b;
    gpu().rms_norm(np, xr, nw, hr, &c);
    EXPECT_EQ(c.data, nullptr) << what << ": a handle kept by a producer that wrote no form";
    EXPECT_TRUE(prepared_q8(h2, b)) << what << ": a producer without a form staled others";

    // The CPU backend writes none and ignores handles.
    std::vector<float> xc = rand_bf16(static_cast<size_t>(T * D), 405), hc(static_cast<size_t>(T * D));
    std::vector<float> wc = rand_bf16(static_cast<size_t>(D), 406, 0.5f, 1.5f);
    ActQ8 cpu_h = b;
    cpu().rms_norm(np, Tensor(xc.data(), DType::F32, {T, D}), Tensor(wc.data(), DType::F32, {D}),
                   Tensor(hc.data(), DType::F32, {T, D}), &cpu_h);
    EXPECT_EQ(cpu_h.data, nullptr) << what << ": the CPU backend filled a handle";
  }
}

TEST_F(CudaPreparedQ8, FormsAreAskedForOnlyWhereAGemvReadsThem) {
  // Ops::reads_int8_activations: the weight types the integer-dot GEMV reads (the engine then asks
  // producers for forms, ForwardContext::q8_forms); float and other quantized weights read the
  // activations as they are. The CPU backend reads none. A producer given a handle writes its form
  // whatever ran before it (no integer-dot GEMV first: CudaOps keeps no state to decide that).
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K}) {
    EXPECT_TRUE(gpu().reads_int8_activations(t)) << dtype_name(t);
    EXPECT_FALSE(cpu().reads_int8_activations(t)) << dtype_name(t);
  }
  for (DType t : {DType::F32, DType::BF16, DType::Q5_K, DType::MXFP4, DType::F8_E4M3_B32})
    EXPECT_FALSE(gpu().reads_int8_activations(t)) << dtype_name(t);
  auto fresh = make_cuda_ops(0, DType::BF16);
  const int64_t T = 2, D = 1024;  // a row the fused norm kernel takes (row_kernel_fits)
  Tensor nw = arena().dev_from(rand_bf16(static_cast<size_t>(D), 411, 0.5f, 1.5f), DType::F32, {D});
  Tensor x = arena().dev_from(rand_bf16(static_cast<size_t>(T * D), 412), DType::BF16, {T, D});
  Tensor h = arena().dev_poisoned(DType::BF16, {T, D});
  ActQ8 a;
  fresh->rms_norm(RmsNormParams{1e-6f, 0.0f}, x, nw, h, &a);
  fresh->synchronize();
  EXPECT_NE(a.data, nullptr) << "the first producer on a new backend wrote no form";
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
    Tensor out_stale = arena().dev_poisoned(act, {T, H});
    gpu().moe_router(kRouter, x, router_w, Tensor(), logits, ids, wts, Tensor());
    gpu().moe_experts({}, x, ids, wts, bank, out);  // an integer-dot GEMV has run
    ActQ8 h_q8;
    gpu().add_rms_norm({1e-6f, 0.0f}, x, r, nw, h, &h_q8);
    EXPECT_TRUE(prepared_q8(h, h_q8));  // written by the norm; the router keeps it
    const uint64_t gen = h_q8.generation;
    gpu().moe_router(kRouter, h, router_w, Tensor(), logits, ids, wts, Tensor(), &h_q8);
    EXPECT_TRUE(prepared_q8(h, h_q8));
    EXPECT_EQ(h_q8.generation, gen);
    gpu().moe_experts({}, h, ids, wts, bank, out, &h_q8);
    gpu().moe_experts({}, clone(h), ids, wts, bank, out_ref);
    EXPECT_TRUE(same_bits(out, out_ref));
    EXPECT_EQ(count_nonfinite(arena().read(out)), 0u);
    // A stale handle (another form written since): the experts quantize h themselves.
    ActQ8 other;
    gpu().moe_router(kRouter, x, router_w, Tensor(), logits, ids, wts, Tensor(), &other);
    EXPECT_FALSE(prepared_q8(h, h_q8));
    gpu().moe_router(kRouter, h, router_w, Tensor(), logits, ids, wts, Tensor());
    gpu().moe_experts({}, h, ids, wts, bank, out_stale, &h_q8);
    EXPECT_TRUE(same_bits(out_stale, out_ref));
  }
}

}  // namespace
}  // namespace ft::testing
#endif  // FT_HAVE_CUDA
