// moe_experts: routed expert FFNs and their weighted sum,
//   out[t] (=|+=) sum_j weights[t, j] * (down_e glu(gate_e x[t] + bg_e, up_e x[t] + bu_e) + bd_e),  e = ids[t, j],
// glu per bank.glu (SwiGLU, gpt-oss's or DeepSeek-V4's clamped SwiGLU, GELU-tanh: expert_glu.cuh), the biases bank.gate_bias,
// up_bias [E, F] and down_bias [E, H] (F32 on the device, row e = the bank's expert e, i.e. the id the
// call gets: a slot id for a cache's slot bank) or absent. Every path adds them where the products
// are formed (the GEMV and grouped GEMM epilogues, matmul_raw's bias), so no launch is added for them.
// x, out [T, H] F32 or BF16; ids I32 [T, k] (ids outside [0, E) are skipped: another executor owns
// them; the CPU backend throws for ids >= E); weights F32 [T, k]; bank experts gate/up [F, H] and
// down [H, F], each kind in one cuda_weight_type for all experts.
//
// Decode (T <= kDecodeMaxTokens): no host synchronisation, fixed launch shapes (graph-capturable).
// Experts are addressed through the bank's device pointer table (CudaOps::expert_table), so an
// expert cache only re-points the views. Per (token, slot) pair: one GEMV fused over gate and up
// with SwiGLU -> h [P, F] (activation dtype), one GEMV for down -> y [P, H] f32, then a combine kernel forms the
// weighted sum in slot order. When both GEMVs take the int8 lane-group layout (gemv_q8_lanes_serves: Q4_K,
// Q6_K, Q8_0, Q4_0 at expert shapes) the gate/up GEMV writes h's int8 form directly; where the down
// GEMV's layout allows (gemv_combines) it forms the weighted sum itself. The same bits either way, a
// launch or two a layer fewer. Bytes moved: each selected expert's 3 matrices once per pair + O(P(H+F)).
// Prefill: pairs sorted by expert (moe_sort.cu, one host sync), rows gathered, then one grouped
// GEMM launch per matrix kind over all experts (moe_grouped_gemm.cu: gate and up fused with SwiGLU,
// then down; weights decoded into shared memory); rows of 64-indivisible widths fall back to per
// expert GEMMs (CudaOps::matmul_raw: cuBLAS after decoding to bf16 tiles). Then the same combine. Bytes moved: every used expert's matrices once + O(P(H+F)).
#include <algorithm>
#include <vector>

#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"
#include "backend/cuda/dequant.cuh"
#include "backend/cuda/expert_glu.cuh"
#include "backend/cuda/launch.h"
#include "backend/cuda/moe_grouped_gemm.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda_factory.h"
#include "backend/op_checks.h"

namespace ft {
namespace cuda {
namespace {

constexpr int64_t kDecodeMaxTokens = 32;

Switch g_fusion("FT_CUDA_MOE_FUSE");  // set_cuda_moe_fusion

/** Carves 256-byte aligned sub-buffers out of one scratch region. */
class Carver {
 public:
  int64_t add(int64_t bytes) {
    const int64_t off = size_;
    size_ += (bytes + 255) / 256 * 256;
    return off;
  }
  int64_t size() const { return size_; }

 private:
  int64_t size_ = 0;
};

/** out[t, d] (=|+=) sum over slots j in order of w[t, j] * y[row(t, j), d], skipping ids outside
 *  [0, E). Slots go kCombineSlots at a time with every load issued before the sums: a load behind a
 *  branch on the previous one made each slot a serial L2 round trip (3.5 us for one decode token). */
constexpr int kCombineSlots = 8;
template <typename T>
__global__ void moe_combine_kernel(const int32_t* ids, const float* w, int64_t T_, int k, int32_t E, const float* y,
                                   const int32_t* row_of_pair, int64_t H, bool accumulate, T* out) {
  // ids, w (and row_of_pair) were written before the previous kernel (the down GEMV) started: the
  // thread's first slots are read before the PDL wait.
  const int64_t i0 = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  int32_t e0[kCombineSlots];
  float w0[kCombineSlots];
  int64_t r0[kCombineSlots];
  if (i0 < T_ * H) {
    const int64_t t = i0 / H;
#pragma unroll
    for (int u = 0; u < kCombineSlots; ++u) {
      const int64_t pair = t * k + u;
      e0[u] = u < k ? ids[pair] : -1;
      const bool used = e0[u] >= 0 && e0[u] < E;
      r0[u] = used ? (row_of_pair ? row_of_pair[pair] : pair) : 0;
      w0[u] = used ? w[pair] : 0.0f;
    }
  }
  pdl_enter();
  for (int64_t i = i0; i < T_ * H; i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / H, d = i % H;
    float acc = accumulate ? to_f(out[i]) : 0.0f;
    for (int j0 = 0; j0 < k; j0 += kCombineSlots) {
      float wv[kCombineSlots], yv[kCombineSlots];
      bool used[kCombineSlots];
      const bool have = i == i0 && j0 == 0;
#pragma unroll
      for (int u = 0; u < kCombineSlots; ++u) {
        const int64_t pair = t * k + j0 + u;
        const bool in = j0 + u < k;
        const int32_t e = have ? e0[u] : (in ? ids[pair] : -1);
        used[u] = e >= 0 && e < E;
        const int64_t row = have ? r0[u] : (used[u] ? (row_of_pair ? row_of_pair[pair] : pair) : 0);
        wv[u] = have ? w0[u] : (used[u] ? w[pair] : 0.0f);
        yv[u] = used[u] ? y[row * H + d] : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < kCombineSlots; ++u)
        if (used[u]) acc = fmaf(wv[u], yv[u], acc);  // as gemv_q8.cu's fused combine
    }
    out[i] = from_f<T>(acc);
  }
}

/** xs[r] = x[order[r] / k] for r < n_valid (converted to U); inv[order[r]] = r for every r. */
template <typename T, typename U>
__global__ void moe_gather_kernel(const T* x, int64_t H, int k, const int32_t* order, int64_t P, int64_t n_valid,
                                  U* xs, int32_t* inv) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < P * H;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / H, d = i % H;
    const int32_t pair = order[r];
    if (d == 0) inv[pair] = static_cast<int32_t>(r);
    if (r < n_valid) xs[i] = from_f<U>(to_f(x[(pair / k) * H + d]));
  }
}

struct BankShape {
  int64_t F = 0;
  DType gate = DType::F32, up = DType::F32, down = DType::F32;
  int glu = kGluSwiglu;  // expert_glu.cuh
  float alpha = 1.702f, limit = 7.0f;
  const float* gate_bias = nullptr;  // [E, F] or null
  const float* up_bias = nullptr;    // [E, F] or null
  const float* down_bias = nullptr;  // [E, H] or null
};

BankShape check_bank(const ExpertBank& bank, int64_t H) {
  if (bank.up.size() != bank.gate.size() || bank.down.size() != bank.gate.size())
    fail(ErrorCode::kInvalidArgument, "moe_experts: bank has {} gate, {} up, {} down experts", bank.gate.size(),
         bank.up.size(), bank.down.size());
  if (bank.gate.empty()) fail(ErrorCode::kInvalidArgument, "moe_experts: bank has no experts");
  BankShape s;
  s.F = bank.gate[0].ndim == 2 ? bank.gate[0].dim(0) : -1;
  s.gate = bank.gate[0].dtype, s.up = bank.up[0].dtype, s.down = bank.down[0].dtype;
  for (size_t e = 0; e < bank.gate.size(); ++e) {
    const Tensor &g = bank.gate[e], &u = bank.up[e], &d = bank.down[e];
    check_dev("moe_experts", "bank.gate", g);
    check_dev("moe_experts", "bank.up", u);
    check_dev("moe_experts", "bank.down", d);
    if (!g.has_shape({s.F, H}) || !u.has_shape({s.F, H}) || !d.has_shape({H, s.F}))
      fail(ErrorCode::kInvalidArgument,
           "moe_experts: expert {} has gate {}, up {}, down {}; expected [{}, {}], [{}, {}], [{}, {}]", e, g.str(),
           u.str(), d.str(), s.F, H, s.F, H, H, s.F);
    if (g.dtype != s.gate || u.dtype != s.up || d.dtype != s.down)
      fail(ErrorCode::kUnsupported, "moe_experts: expert {} has dtypes {}/{}/{}, expert 0 {}/{}/{}; a bank needs one "
           "dtype per matrix kind", e, dtype_name(g.dtype), dtype_name(u.dtype), dtype_name(d.dtype),
           dtype_name(s.gate), dtype_name(s.up), dtype_name(s.down));
  }
  for (DType t : {s.gate, s.up, s.down})
    if (!cuda_weight_type(t))
      fail(ErrorCode::kUnsupported, "moe_experts: expert weight dtype {} has no CUDA kernel", dtype_name(t));
  op_checks::expert_bank_extras("moe_experts", bank, H);  // the GLU's fields, the biases' dtype and shapes
  if (bank.glu == ExpertGlu::kSwigluOai) s.glu = kGluSwigluOai;
  else if (bank.glu == ExpertGlu::kGeluTanh) s.glu = kGluGeluTanh;
  else if (bank.glu == ExpertGlu::kSwigluClamp) s.glu = kGluSwigluClamp;
  else if (bank.glu != ExpertGlu::kSwiglu)
    fail(ErrorCode::kUnsupported, "moe_experts: expert GLU {} has no CUDA kernel", static_cast<int>(bank.glu));
  s.alpha = bank.glu_alpha, s.limit = bank.glu_limit;
  const std::pair<const Tensor*, const float**> biases[] = {
      {&bank.gate_bias, &s.gate_bias}, {&bank.up_bias, &s.up_bias}, {&bank.down_bias, &s.down_bias}};
  for (const auto& [t, dst] : biases) {
    if (t->empty()) continue;
    check_dev("moe_experts", t == &bank.gate_bias ? "bank.gate_bias" : t == &bank.up_bias ? "bank.up_bias"
                                                                                            : "bank.down_bias", *t);
    *dst = t->ptr<float>();
  }
  return s;
}

}  // namespace

MoeScratch moe_scratch_layout(int64_t T, int64_t k, int64_t H, int64_t F, int32_t E, int64_t es, bool glu) {
  const int64_t P = T * k;
  Carver c;
  MoeScratch m;
  if (T <= kDecodeMaxTokens) {
    m.h = c.add(P * F * es);
    m.u = glu ? -1 : c.add(P * F * es);
    m.y = c.add(P * H * 4);
  } else {
    m.order = c.add(P * 4), m.inv = c.add(P * 4), m.xs = c.add(P * H * es);
    m.h = c.add(P * F * es), m.u = c.add(P * F * es), m.y = c.add(P * H * 4);
    m.sort = c.add(moe_sort_temp_bytes(P, E));
    m.tiles = c.add((E + 1) * 4);
  }
  m.bytes = c.size();
  return m;
}

}  // namespace cuda

void CudaOps::moe_experts(const MoeExpertsParams& p, const Tensor& x, const Tensor& ids, const Tensor& weights,
                          const ExpertBank& bank, Tensor out, const ActQ8* x_q8) {
  cuda::check_act("moe_experts", "x", x);
  cuda::check_act("moe_experts", "out", out);
  cuda::check_same_shape("moe_experts", "out", out, x);
  cuda::check_dtype("moe_experts", "ids", ids, {DType::I32});
  cuda::check_dtype("moe_experts", "weights", weights, {DType::F32});
  const int64_t T = x.rows(), H = x.cols(), k = ids.cols();
  if (ids.rows() != T || weights.rows() != T || weights.cols() != k || k < 1)
    fail(ErrorCode::kInvalidArgument, "moe_experts: ids {} and weights {} must both be [{}, k]", ids.str(),
         weights.str(), T);
  const cuda::BankShape bs = cuda::check_bank(bank, H);
  const int64_t F = bs.F, P = T * k;
  const int32_t E = bank.n_expert();
  if (T == 0) return;

  const bool decode = T <= cuda::kDecodeMaxTokens;
  const bool glu = bs.gate == bs.up;
  // Intermediates (gathered rows, h = silu(gate) * up) keep the activation dtype: F32 activations
  // stay exact up to the weights (router decisions downstream depend on it); y is always F32. The
  // grouped prefill GEMM rounds its inputs to bf16 anyway, so its intermediates are stored in bf16.
  const DType mid = x.dtype;
  const int64_t es = mid == DType::F32 ? 4 : 2;
  const cuda::MoeScratch sl = cuda::moe_scratch_layout(T, k, H, F, E, es, glu);
  const int64_t o_h = sl.h, o_u = sl.u, o_y = sl.y, o_order = sl.order, o_inv = sl.inv, o_xs = sl.xs, o_sort = sl.sort,
                o_tiles = sl.tiles;
  auto* base = static_cast<uint8_t*>(scratch(Scratch::kMoe, sl.bytes));
  uint8_t* h = base + o_h;
  auto* y = reinterpret_cast<float*>(base + o_y);
  const int32_t* row_of_pair = nullptr;

  if (decode) {
    const uint64_t* table = expert_table(bank);
    auto vec = [](DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q4_K; };
    for (size_t e = 0; e < bank.gate.size(); ++e)  // the GEMV's 16-byte weight loads need aligned experts
      for (const Tensor* t : {&bank.gate[e], &bank.up[e], &bank.down[e]})
        if (vec(t->dtype) && (reinterpret_cast<uintptr_t>(t->data) % 16 != 0 || t->row_bytes() % 16 != 0))
          fail(ErrorCode::kUnsupported, "moe_experts: expert {} {} weights are not 16-byte aligned", e,
               dtype_name(t->dtype));
    // int8 activations for the integer-dot GEMV: x's as its producer wrote them (handed in: x_q8), or T rows of
    // H quantized into q8 first; then P rows of F (h) in q8.
    // With lane-group GEMVs on both sides (Q4_K and friends at these shapes), the gate/up GEMV writes h's
    // int8 form itself (no quantize launch before down; region q8_h, after x's). The down GEMV forms
    // the weighted sum (no combine launch) where its layout allows (gemv_combines: bf16 too).
    const bool fuse = cuda::g_fusion.on();
    const bool h_q8 = fuse && glu && F % 32 == 0 && cuda::gemv_q8_lanes_serves(bs.gate, F, H) &&
                      cuda::gemv_q8_lanes_serves(bs.down, H, F);
    const bool any_q8 = cuda::gemv_q8_supports(bs.gate) || cuda::gemv_q8_supports(bs.up) || cuda::gemv_q8_supports(bs.down);
    const bool fused_combine = fuse && cuda::gemv_combines(bs.down, H, F, any_q8) && k <= 16;
    void* q8 = nullptr;
    void* q8_h = nullptr;
    if (any_q8) {
      const int64_t x_bytes = (cuda::gemv_q8_scratch_bytes(T, H) + 255) / 256 * 256;
      q8 = scratch(Scratch::kQ8, h_q8 ? x_bytes + cuda::gemv_q8_scratch_bytes(P, F)
                                      : std::max(cuda::gemv_q8_scratch_bytes(T, H), cuda::gemv_q8_scratch_bytes(P, F)));
      if (h_q8) q8_h = static_cast<uint8_t*>(q8) + x_bytes;
    }
    void* handed = handed_q8(x_q8, x.data, x.dtype, T, H);
    cuda::GemvArgs a;
    a.q8 = handed ? handed : q8, a.q8_ready = handed != nullptr;
    a.table = table, a.ids = ids.ptr<int32_t>(), a.n_expert = E;
    a.N = F, a.K = H, a.row_bytes = bank.gate[0].row_bytes();
    a.x = x.data, a.x_f32 = x.dtype == DType::F32, a.ldx = H, a.x_div = static_cast<int>(k);
    a.y = h, a.y_f32 = mid == DType::F32, a.ldy = F;
    a.glu_kind = bs.glu, a.glu_alpha = bs.alpha, a.glu_limit = bs.limit;
    if (glu) {  // the biases and the GLU in the GEMV's epilogue
      a.col_a = 0, a.col_b = 1;
      a.ebias_a = bs.gate_bias, a.ebias_b = bs.up_bias;
      a.q8_out = q8_h;
      cuda::launch_gemv(bs.gate, 1, true, a, P, stream_);
    } else {  // gate and up in different dtypes: two GEMVs (each adding its bias), then the GLU
      uint8_t* u = base + o_u;
      a.col_a = 0, a.ebias_a = bs.gate_bias;
      cuda::launch_gemv(bs.gate, 1, false, a, P, stream_);
      a.col_a = 1, a.y = u, a.row_bytes = bank.up[0].row_bytes(), a.ebias_a = bs.up_bias;
      cuda::launch_gemv(bs.up, 1, false, a, P, stream_);
      cuda::launch_moe_glu(h, u, mid, P * F, bs.glu, bs.alpha, bs.limit, stream_);
    }
    cuda::GemvArgs d;
    d.q8 = q8_h ? q8_h : q8, d.q8_ready = q8_h != nullptr;
    d.table = table, d.col_a = 2, d.ids = ids.ptr<int32_t>(), d.n_expert = E;
    d.N = H, d.K = F, d.row_bytes = bank.down[0].row_bytes();
    d.x = h, d.x_f32 = mid == DType::F32, d.ldx = F, d.x_div = 1;
    d.y = y, d.y_f32 = true, d.ldy = H;
    d.ebias_a = bs.down_bias;  // y = down h + b, then the weighted sum
    d.ids_before = true;  // the router (or the admission) ran before the gate/up GEMV
    if (fused_combine) {
      d.combine_weights = weights.ptr<float>(), d.combine_out = out.data, d.combine_out_f32 = out.dtype == DType::F32;
      d.combine_accumulate = p.accumulate, d.combine_k = static_cast<int>(k), d.combine_ld = H;
      cuda::launch_gemv(bs.down, 1, false, d, P, stream_);
      return;
    }
    cuda::launch_gemv(bs.down, 1, false, d, P, stream_);
  } else {
    auto* order = reinterpret_cast<int32_t*>(base + o_order);
    auto* inv = reinterpret_cast<int32_t*>(base + o_inv);
    uint8_t* xs = base + o_xs;
    uint8_t* u = base + o_u;
    auto* offsets = static_cast<int32_t*>(pinned((E + 1) * 4));
    cuda::moe_sort_pairs(ids.ptr<int32_t>(), P, E, base + o_sort, order, offsets, stream_);
    const std::vector<int32_t> off(offsets, offsets + E + 1);  // pinned buffer may be reused below
    const int64_t n_valid = off[static_cast<size_t>(E)];
    // The grouped GEMM multiplies bf16 by bf16, so its gathered rows and h are stored in bf16 (the same
    // rounding it would apply on load; half the bytes of the F32 copies it re-reads per column tile).
    const bool grouped = cuda::grouped_gemm_supports(bs.gate, H) && cuda::grouped_gemm_supports(bs.down, F) &&
                         (glu || cuda::grouped_gemm_supports(bs.up, H));
    const unsigned gather_grid = cuda::grid_1d(P * H, 256);
    FT_DISPATCH_ACT("moe_experts", "x", x.dtype, {
      if (grouped)
        cuda::moe_gather_kernel<T, cuda::bf16><<<gather_grid, 256, 0, stream_>>>(
            x.ptr<T>(), H, static_cast<int>(k), order, P, n_valid, reinterpret_cast<cuda::bf16*>(xs), inv);
      else
        cuda::moe_gather_kernel<T, T><<<gather_grid, 256, 0, stream_>>>(x.ptr<T>(), H, static_cast<int>(k), order, P,
                                                                        n_valid, reinterpret_cast<T*>(xs), inv);
    });
    FT_CUDA_LAUNCH_CHECK();
    if (n_valid > 0 && grouped) {
      // One launch per matrix kind over all experts (gate and up fused with SwiGLU when they share a dtype).
      const int32_t* d_off = cuda::moe_sort_device_offsets(base + o_sort, P);
      auto* tiles = reinterpret_cast<int32_t*>(base + o_tiles);
      cuda::launch_tile_prefix(d_off, E, tiles, stream_);
      cuda::GroupedGemmArgs g;
      g.x = xs, g.x_f32 = false, g.K = H, g.N = F;
      g.table = expert_table(bank), g.offsets = d_off, g.tile_start = tiles, g.E = E;
      g.y = h, g.y_f32 = false, g.ldy = F;
      g.row_bytes = bank.gate[0].row_bytes(), g.row_bytes_b = bank.up[0].row_bytes();
      g.glu_kind = bs.glu, g.glu_alpha = bs.alpha, g.glu_limit = bs.limit;
      if (glu) {  // the biases and the GLU in the epilogue
        g.glu = true, g.col_a = 0, g.col_b = 1;
        g.bias_a = bs.gate_bias, g.bias_b = bs.up_bias;
        cuda::launch_grouped_gemm(bs.gate, g, n_valid, stream_);
      } else {
        g.col_a = 0, g.bias_a = bs.gate_bias;
        cuda::launch_grouped_gemm(bs.gate, g, n_valid, stream_);
        g.col_a = 1, g.y = u, g.row_bytes = bank.up[0].row_bytes(), g.bias_a = bs.up_bias;
        cuda::launch_grouped_gemm(bs.up, g, n_valid, stream_);
        cuda::launch_moe_glu(h, u, DType::BF16, n_valid * F, bs.glu, bs.alpha, bs.limit, stream_);
      }
      cuda::GroupedGemmArgs d = g;
      d.glu = false, d.x = h, d.x_f32 = false, d.K = F, d.N = H, d.col_a = 2, d.row_bytes = bank.down[0].row_bytes();
      d.bias_a = bs.down_bias, d.bias_b = nullptr;
      d.y = y, d.y_f32 = true, d.ldy = H;
      cuda::launch_grouped_gemm(bs.down, d, n_valid, stream_);
    } else {
      // expert e's bias row, as matmul_raw's bias (empty: none)
      auto row = [](const Tensor& bias, int32_t e) { return bias.empty() ? Tensor() : bias.index(e); };
      for (int32_t e = 0; e < E; ++e) {
        const int64_t b = off[static_cast<size_t>(e)], n = off[static_cast<size_t>(e) + 1] - b;
        if (n == 0) continue;
        matmul_raw(xs + b * H * es, mid, n, bank.gate[static_cast<size_t>(e)], h + b * F * es, mid, F,
                   row(bank.gate_bias, e));
        matmul_raw(xs + b * H * es, mid, n, bank.up[static_cast<size_t>(e)], u + b * F * es, mid, F,
                   row(bank.up_bias, e));
      }
      if (n_valid > 0) cuda::launch_moe_glu(h, u, mid, n_valid * F, bs.glu, bs.alpha, bs.limit, stream_);
      for (int32_t e = 0; e < E; ++e) {
        const int64_t b = off[static_cast<size_t>(e)], n = off[static_cast<size_t>(e) + 1] - b;
        if (n == 0) continue;
        matmul_raw(h + b * F * es, mid, n, bank.down[static_cast<size_t>(e)], y + b * H, DType::F32, H,
                   row(bank.down_bias, e));
      }
    }
    row_of_pair = inv;
  }

  const unsigned combine_grid = cuda::grid_1d(T * H, 256);
  FT_DISPATCH_ACT("moe_experts", "out", out.dtype, {
    cuda::launch_pdl(cuda::moe_combine_kernel<T>, combine_grid, 256, 0, stream_, ids.ptr<int32_t>(),
                     weights.ptr<float>(), x.rows(), static_cast<int>(k), E, y, row_of_pair, H, p.accumulate,
                     out.ptr<T>());
  });
}

void set_cuda_moe_fusion(bool enabled) { cuda::g_fusion.set(enabled); }

}  // namespace ft
