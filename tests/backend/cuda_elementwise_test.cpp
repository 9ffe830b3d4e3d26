// CUDA vs CPU: swiglu, add, scale, sigmoid, add_scaled_rows, softmax, rms_norm, rope, embedding
// on random inputs of several shapes; GPU outputs poisoned first, rel L2 <= 1e-2.
#include <algorithm>

#include <cstring>

#include "backend/op_harness.h"
#include "moe/host_memory.h"
#include "util/error.h"

namespace ft::testing {
namespace {

class CudaElementwise : public GpuTest {
 protected:
  // CPU result buffer + view
  Tensor cpu_out(std::vector<float>& buf, std::vector<int64_t> shape) {
    buf.assign(static_cast<size_t>(numel_of(shape)), 0.0f);
    return Tensor(buf.data(), DType::F32, shape.data(), static_cast<int>(shape.size()));
  }
};

const std::vector<std::vector<int64_t>> kShapes = {{1, 64}, {7, 96}, {33, 2048}};

TEST_F(CudaElementwise, BinaryAndUnaryOps) {
  uint32_t seed = 10;
  for (const auto& shape : kShapes) {
    const size_t n = static_cast<size_t>(numel_of(shape));
    const auto a = rand_bf16(n, seed++, -4, 4), b = rand_bf16(n, seed++, -2, 2);
    Tensor ha = arena().host_f32(a, shape), hb = arena().host_f32(b, shape);
    Tensor da = arena().dev_from(a, DType::BF16, shape), db = arena().dev_from(b, DType::BF16, shape);
    const std::string what = Tensor(nullptr, DType::BF16, shape.data(), 2).shape_str();
    std::vector<float> ref;
    Tensor out;

    cpu().swiglu(ha, hb, cpu_out(ref, shape));
    out = arena().dev_poisoned(DType::BF16, shape);
    gpu().swiglu(da, db, out);
    double e = compare(out, ref);
    report("swiglu", what, e);
    EXPECT_LE(e, kTol);

    cpu().add(ha, hb, cpu_out(ref, shape));
    out = arena().dev_poisoned(DType::BF16, shape);
    gpu().add(da, db, out);
    e = compare(out, ref);
    report("add", what, e);
    EXPECT_LE(e, kTol);

    cpu().scale(ha, -0.37f, cpu_out(ref, shape));
    out = arena().dev_poisoned(DType::BF16, shape);
    gpu().scale(da, -0.37f, out);
    e = compare(out, ref);
    report("scale", what, e);
    EXPECT_LE(e, kTol);

    cpu().sigmoid(ha, cpu_out(ref, shape));
    out = arena().dev_poisoned(DType::BF16, shape);
    gpu().sigmoid(da, out);
    e = compare(out, ref);
    report("sigmoid", what, e);
    EXPECT_LE(e, kTol);

    // add_scaled_rows: y += alpha * s[t] * x, with F32 row scales and without
    const int64_t T = shape[0];
    const auto s = rand_bf16(static_cast<size_t>(T), seed++, -1, 1);
    std::vector<float> y_ref = b;
    cpu().add_scaled_rows(ha, arena().host_f32(s, {T}), 0.5f, Tensor(y_ref.data(), DType::F32, shape.data(), 2));
    cpu().add_scaled_rows(ha, Tensor(), -0.25f, Tensor(y_ref.data(), DType::F32, shape.data(), 2));
    Tensor dy = arena().dev_from(b, DType::BF16, shape);
    gpu().add_scaled_rows(da, arena().dev_from(s, DType::F32, {T}), 0.5f, dy);
    gpu().add_scaled_rows(da, Tensor(), -0.25f, dy);
    e = compare(dy, y_ref);
    report("add_scaled_rows", what, e);
    EXPECT_LE(e, kTol);

    // softmax, bf16 -> bf16 and in place in F32
    cpu().softmax(ha, cpu_out(ref, shape));
    out = arena().dev_poisoned(DType::BF16, shape);
    gpu().softmax(da, out);
    e = compare(out, ref);
    report("softmax", what + " bf16", e);
    EXPECT_LE(e, kTol);
    Tensor df = arena().dev_from(a, DType::F32, shape);
    gpu().softmax(df, df);
    e = compare(df, ref);
    report("softmax", what + " f32 in place", e);
    EXPECT_LE(e, 1e-5);
  }
}

TEST_F(CudaElementwise, RmsNorm) {
  uint32_t seed = 100;
  for (const auto& shape : kShapes) {
    for (DType wdt : {DType::F32, DType::BF16}) {
      const int64_t D = shape[1];
      const auto x = rand_bf16(static_cast<size_t>(numel_of(shape)), seed++, -3, 3);
      const auto w = rand_bf16(static_cast<size_t>(D), seed++, 0.5f, 1.5f);
      RmsNormParams p;
      p.eps = 1e-5f;
      p.weight_offset = wdt == DType::BF16 ? 1.0f : 0.0f;
      std::vector<float> ref(x.size());
      cpu().rms_norm(p, arena().host_f32(x, shape), arena().host_f32(w, {D}),
                     Tensor(ref.data(), DType::F32, shape.data(), 2));
      Tensor out = arena().dev_poisoned(DType::BF16, shape);
      gpu().rms_norm(p, arena().dev_from(x, DType::BF16, shape), arena().dev_from(w, wdt, {D}), out);
      const double e = compare(out, ref);
      report("rms_norm", Tensor(nullptr, wdt, shape.data(), 2).str(), e);
      EXPECT_LE(e, kTol);
    }
  }
}

// The fused residual add + RMSNorm (one block per row for rows over 256; shorter rows take the
// default add then rms_norm) against the CPU's add then rms_norm, in both activation dtypes.
TEST_F(CudaElementwise, AddRmsNorm) {
  uint32_t seed = 150;
  for (const std::vector<int64_t>& shape : {std::vector<int64_t>{1, 2048}, {3, 4096}, {4, 96}}) {
    for (DType act : {DType::F32, DType::BF16}) {
      const int64_t D = shape[1];
      const size_t n = static_cast<size_t>(numel_of(shape));
      const auto x = rand_bf16(n, seed++, -3, 3), r = rand_bf16(n, seed++, -1, 1);
      const auto w = rand_bf16(static_cast<size_t>(D), seed++, 0.5f, 1.5f);
      RmsNormParams p;
      p.eps = 1e-6f;
      std::vector<float> sum(n), ref(n);
      Tensor hx = arena().host_f32(x, shape), hs(sum.data(), DType::F32, shape.data(), 2);
      cpu().add(hx, arena().host_f32(r, shape), hs);
      cpu().rms_norm(p, hs, arena().host_f32(w, {D}), Tensor(ref.data(), DType::F32, shape.data(), 2));
      Tensor dx = arena().dev_from(x, act, shape), out = arena().dev_poisoned(act, shape);
      gpu().add_rms_norm(p, dx, arena().dev_from(r, act, shape), arena().dev_from(w, DType::F32, {D}), out);
      const std::string what = Tensor(nullptr, act, shape.data(), 2).str();
      double e = compare(dx, sum);
      report("add_rms_norm x", what, e);
      EXPECT_LE(e, kTol);
      e = compare(out, ref);
      report("add_rms_norm out", what, e);
      EXPECT_LE(e, kTol);
    }
  }
}

/** Positions step * t, odd tokens shifted by `jump` (so neighbours are far apart). */
std::vector<int32_t> rope_positions(int64_t T, int32_t step, int32_t jump) {
  std::vector<int32_t> pos(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) pos[static_cast<size_t>(t)] = static_cast<int32_t>(step * t + (t % 2) * jump);
  return pos;
}

/** The standard RoPE table: inv_freq[i] = theta^(-2i / n_rot), i < n_rot / 2. */
std::vector<float> rope_inv_freq(int64_t n_rot, float theta) {
  std::vector<float> inv(static_cast<size_t>(n_rot / 2));
  for (size_t i = 0; i < inv.size(); ++i)
    inv[i] = std::pow(theta, -2.0f * static_cast<float>(i) / static_cast<float>(n_rot));
  return inv;
}

RopeParams rope_params(RopeMode mode, int64_t head_dim, int64_t n_rot) {
  RopeParams p;
  p.mode = mode, p.head_dim = static_cast<int32_t>(head_dim), p.n_rot = static_cast<int32_t>(n_rot);
  p.attn_factor = 1.0f;
  return p;
}

TEST_F(CudaElementwise, RopeModesAndPartialRotation) {
  struct Case {
    RopeMode mode;
    int64_t T, n_head, head_dim, n_rot;
  };
  const Case cases[] = {{RopeMode::kNeox, 5, 4, 16, 16},
                        {RopeMode::kNormal, 5, 4, 16, 16},
                        {RopeMode::kNeox, 37, 8, 128, 64},
                        {RopeMode::kNormal, 9, 2, 64, 32}};
  uint32_t seed = 200;
  for (const Case& c : cases) {
    const int64_t W = c.n_head * c.head_dim;
    const auto x = rand_bf16(static_cast<size_t>(c.T * W), seed++);
    const std::vector<int32_t> pos = rope_positions(c.T, 3, 1000);
    const std::vector<float> inv = rope_inv_freq(c.n_rot, 10000.0f);
    RopeParams p = rope_params(c.mode, c.head_dim, c.n_rot);
    std::vector<float> ref = x;
    p.inv_freq = arena().host_f32(inv, {c.n_rot / 2});
    cpu().rope(p, Tensor(ref.data(), DType::F32, {c.T, W}), arena().host_i32(pos, {c.T}));
    p.inv_freq = arena().dev_from(inv, DType::F32, {c.n_rot / 2});
    Tensor dx = arena().dev_from(x, DType::BF16, {c.T, W});
    gpu().rope(p, dx, arena().dev_i32(pos, {c.T}));
    const double e = compare(dx, ref);
    report("rope", std::string(c.mode == RopeMode::kNeox ? "neox" : "normal") + " T=" + std::to_string(c.T) +
                       " hd=" + std::to_string(c.head_dim) + " rot=" + std::to_string(c.n_rot), e);
    EXPECT_LE(e, kTol);
  }
}

TEST_F(CudaElementwise, NormRopeFusedMatchesNormThenRope) {
  // The fused QK-norm + RoPE kernel against the CPU's rms_norm then rope (Ops' default norm_rope),
  // F32 (exact up to the angle math) and BF16 activations, both modes, partial rotation.
  struct Case {
    RopeMode mode;
    int64_t T, n_head, head_dim, n_rot;
    DType act;
  };
  const Case cases[] = {{RopeMode::kNeox, 7, 32, 128, 128, DType::F32},
                        {RopeMode::kNeox, 3, 4, 128, 64, DType::BF16},
                        {RopeMode::kNormal, 5, 4, 64, 64, DType::F32},
                        {RopeMode::kNormal, 9, 2, 96, 32, DType::BF16},
                        {RopeMode::kNeox, 2, 2, 256, 256, DType::F32}};
  uint32_t seed = 250;
  for (const Case& c : cases) {
    const int64_t W = c.n_head * c.head_dim;
    const auto x = rand_bf16(static_cast<size_t>(c.T * W), seed++, -3.0f, 3.0f);
    const auto w = rand_bf16(static_cast<size_t>(c.head_dim), seed++, 0.5f, 1.5f);
    const std::vector<int32_t> pos = rope_positions(c.T, 5, 700);
    const std::vector<float> inv = rope_inv_freq(c.n_rot, 1000000.0f);
    RopeParams p = rope_params(c.mode, c.head_dim, c.n_rot);
    const RmsNormParams np{1e-6f, 0.0f};
    std::vector<float> ref = x;
    p.inv_freq = arena().host_f32(inv, {c.n_rot / 2});
    cpu().norm_rope(np, arena().host_f32(w, {c.head_dim}), p, Tensor(ref.data(), DType::F32, {c.T, W}),
                    arena().host_i32(pos, {c.T}));
    p.inv_freq = arena().dev_from(inv, DType::F32, {c.n_rot / 2});
    Tensor dx = arena().dev_from(x, c.act, {c.T, W});
    gpu().norm_rope(np, arena().dev_from(w, DType::F32, {c.head_dim}), p, dx, arena().dev_i32(pos, {c.T}));
    const double e = compare(dx, ref);
    report("norm_rope", std::string(c.mode == RopeMode::kNeox ? "neox" : "normal") + " hd=" +
                            std::to_string(c.head_dim) + " rot=" + std::to_string(c.n_rot) + " " + dtype_name(c.act),
           e);
    EXPECT_LE(e, c.act == DType::F32 ? 1e-5 : kTol);

    // q and k (half the heads, its own weight) in one launch, k and v stored into the pages:
    // qk_norm_rope_store. Token t is sequence t, whose block of its position maps to page t.
    const int64_t hk = std::max<int64_t>(1, c.n_head / 2), Wk = hk * c.head_dim, page = 16;
    const auto xk = rand_bf16(static_cast<size_t>(c.T * Wk), seed++, -3.0f, 3.0f);
    const auto xv = rand_bf16(static_cast<size_t>(c.T * Wk), seed++, -3.0f, 3.0f);
    const auto wk = rand_bf16(static_cast<size_t>(c.head_dim), seed++, 0.5f, 1.5f);
    int32_t max_blocks = 0;
    for (int32_t q_pos : pos) max_blocks = std::max<int32_t>(max_blocks, q_pos / static_cast<int32_t>(page) + 1);
    std::vector<int32_t> seq(static_cast<size_t>(c.T)), start(static_cast<size_t>(c.T + 1));
    std::vector<int32_t> table(static_cast<size_t>(c.T * max_blocks), -1);
    for (int64_t t = 0; t < c.T; ++t) {
      seq[static_cast<size_t>(t)] = static_cast<int32_t>(t), start[static_cast<size_t>(t + 1)] = static_cast<int32_t>(t + 1);
      table[static_cast<size_t>(t * max_blocks + pos[static_cast<size_t>(t)] / page)] = static_cast<int32_t>(t);
    }
    auto batch_on = [&](bool dev) {
      BatchInfo bi;
      bi.n_tokens = static_cast<int32_t>(c.T), bi.n_seqs = static_cast<int32_t>(c.T), bi.max_blocks = max_blocks;
      bi.max_kv_len = *std::max_element(pos.begin(), pos.end()) + 1;
      bi.positions = dev ? arena().dev_i32(pos, {c.T}) : arena().host_i32(pos, {c.T});
      bi.seq_index = dev ? arena().dev_i32(seq, {c.T}) : arena().host_i32(seq, {c.T});
      bi.seq_start = dev ? arena().dev_i32(start, {c.T + 1}) : arena().host_i32(start, {c.T + 1});
      bi.block_tables = dev ? arena().dev_i32(table, {c.T, max_blocks}) : arena().host_i32(table, {c.T, max_blocks});
      return bi;
    };
    const std::vector<int64_t> kv_shape = {c.T, page, hk, c.head_dim};
    const size_t kv_n = static_cast<size_t>(numel_of(kv_shape));
    std::vector<float> ref_q = x, ref_k = xk, ref_v = xv, ref_kc(kv_n, 0.0f), ref_vc(kv_n, 0.0f);
    p.inv_freq = arena().host_f32(inv, {c.n_rot / 2});
    cpu().qk_norm_rope_store(np, arena().host_f32(w, {c.head_dim}), arena().host_f32(wk, {c.head_dim}), p,
                             Tensor(ref_q.data(), DType::F32, {c.T, W}), Tensor(ref_k.data(), DType::F32, {c.T, Wk}),
                             Tensor(ref_v.data(), DType::F32, {c.T, Wk}), batch_on(false),
                             KvLayer{Tensor(ref_kc.data(), DType::F32, kv_shape.data(), 4),
                                     Tensor(ref_vc.data(), DType::F32, kv_shape.data(), 4)});
    p.inv_freq = arena().dev_from(inv, DType::F32, {c.n_rot / 2});
    Tensor dq = arena().dev_from(x, c.act, {c.T, W}), dk = arena().dev_from(xk, c.act, {c.T, Wk});
    Tensor dkc = arena().dev_from(std::vector<float>(kv_n, 0.0f), c.act, kv_shape);
    Tensor dvc = arena().dev_from(std::vector<float>(kv_n, 0.0f), c.act, kv_shape);
    gpu().qk_norm_rope_store(np, arena().dev_from(w, DType::F32, {c.head_dim}),
                             arena().dev_from(wk, DType::F32, {c.head_dim}), p, dq, dk,
                             arena().dev_from(xv, c.act, {c.T, Wk}), batch_on(true), KvLayer{dkc, dvc});
    const double eq = compare(dq, ref_q), ek = compare(dk, ref_k), ekc = compare(dkc, ref_kc),
                 evc = compare(dvc, ref_vc);
    report("qk_norm_rope_store q", dtype_name(c.act), eq);
    report("qk_norm_rope_store k", dtype_name(c.act), ek);
    report("qk_norm_rope_store k pages", dtype_name(c.act), ekc);
    report("qk_norm_rope_store v pages", dtype_name(c.act), evc);
    EXPECT_LE(eq, c.act == DType::F32 ? 1e-5 : kTol);
    EXPECT_LE(ek, c.act == DType::F32 ? 1e-5 : kTol);
    EXPECT_LE(ekc, c.act == DType::F32 ? 1e-5 : kTol);
    EXPECT_EQ(evc, 0.0);  // v is copied
  }
}

TEST_F(CudaElementwise, EmbeddingAnyTableDtype) {
  const int64_t V = 50, H = 256;
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 1};
  const int64_t T = static_cast<int64_t>(ids.size());
  uint32_t seed = 300;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::IQ4_XS}) {
    const auto w = random_weight(dt, V, H, seed++);
    std::vector<float> ref(static_cast<size_t>(T * H));
    cpu().embedding(arena().host_bytes(w, dt, {V, H}), arena().host_i32(ids, {T}),
                    Tensor(ref.data(), DType::F32, {T, H}));
    Tensor out = arena().dev_poisoned(DType::BF16, {T, H});
    gpu().embedding(arena().dev_bytes(w, dt, {V, H}), arena().dev_i32(ids, {T}), out);
    const double e = compare(out, ref);
    report("embedding", dtype_name(dt), e);
    EXPECT_LE(e, 5e-3);
  }
}

}  // namespace
}  // namespace ft::testing
