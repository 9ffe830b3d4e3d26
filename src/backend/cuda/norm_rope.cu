// norm_rope: per-head RMSNorm (QK-norm) then rotary embedding, in place, in one kernel: x [T, n_heads *
// head_dim] F32 or BF16, w [head_dim] F32/F16/BF16, positions I32 [T], inv_freq F32 [n_rot / 2].
// One warp per (token, head): lane l holds dims l, l + 32, ... (the order rms_norm.cu sums in), the
// normalised head goes through shared memory so each lane can read its rotation partner (NeoX: i and
// i + n_rot/2; normal: 2i and 2i+1), angles and cos/sin scaling as rope.cu. Saves a launch and a
// round trip of the head through memory per call.
// qk_norm_rope_store does q's and k's heads in the same launch and stores k (as rotated) and v into
// the KV pages as kv_write.cu does (token t -> page block_tables[seq, pos / page_size], slot pos %
// page_size; entries with an out-of-range sequence, block or page are skipped): one launch instead of
// three for a decode step's attention inputs.
// Bytes moved: 2 * T * n_heads * head_dim * element size (+ the KV rows: read v once, write k and v).
#include "backend/op_checks.h"
#include "backend/cuda/checks.h"
#include "backend/cuda/common.cuh"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kNrWarps = 4, kNrMaxHeadDim = 256;

/** One tensor's heads: x [T, n_head * hd] with its norm weight (none for v). */
template <typename T>
struct NrHeads {
  T* x;
  const void* w;
  int w_code;
  int64_t rows, n_head;  // rows = T * n_head
};

/** Where the k and v heads go (kv == nullptr: nowhere). */
struct KvStore {
  void* kc = nullptr;
  void* vc = nullptr;
  bool f32 = false;
  int64_t page_size = 0, n_pages = 0, n_seqs = 0;
  const int32_t* seq = nullptr;
  const int32_t* bt = nullptr;
  int max_blocks = 0;
};

/** Rows 0 .. q.rows - 1 are q's heads, the next k.rows k's (normalised, rotated, and stored when
 *  st.kc is set), then v.rows v's (only stored). */
template <typename T>
__global__ void __launch_bounds__(kNrWarps * 32)
    norm_rope_kernel(NrHeads<T> q, NrHeads<T> k, NrHeads<T> v, KvStore st, float eps, float offset,
                     const int32_t* pos, const float* inv_freq, int hd, int n_rot, bool neox, float attn_factor) {
  __shared__ float head[kNrWarps][kNrMaxHeadDim];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  int64_t row = blockIdx.x * static_cast<int64_t>(kNrWarps) + warp;  // token * n_head + head
  int which = 0;  // 0 q, 1 k, 2 v
  if (row >= q.rows) row -= q.rows, which = 1;
  if (which == 1 && row >= k.rows) row -= k.rows, which = 2;
  const NrHeads<T>& g = which == 0 ? q : (which == 1 ? k : v);
  if (row >= g.rows) return;
  const int64_t n_head = g.n_head;
  T* r = g.x + row * hd;
  const uint32_t tok = static_cast<uint32_t>(row) / static_cast<uint32_t>(n_head);  // rows < 2^31
  // Before the PDL wait, everything the kernel before this one (the q/k/v projection) does not write:
  // the token's position and KV page (batch info the host wrote before the step), the norm weight and
  // the rotation. After it, only the head's own values remain to load.
  const int p_int = pos[tok];
  constexpr int kPer = kNrMaxHeadDim / 32;
  // Where this head goes in the pages (k and v rows with a store), or -1.
  int64_t dst = -1;
  if (which > 0 && st.kc) {
    const int s = st.seq[tok];
    const int64_t blk = p_int >= 0 ? p_int / st.page_size : -1;
    if (s >= 0 && s < st.n_seqs && blk >= 0 && blk < st.max_blocks) {
      const int64_t page = st.bt[static_cast<int64_t>(s) * st.max_blocks + blk];
      if (page >= 0 && page < st.n_pages)
        dst = ((page * st.page_size + p_int % st.page_size) * n_head + (row - static_cast<int64_t>(tok) * n_head)) * hd;
    }
  }
  auto store = [&](int i, float val) {
    if (dst < 0) return;
    void* base = which == 1 ? st.kc : st.vc;
    if (st.f32) static_cast<float*>(base)[dst + i] = val;
    else static_cast<bf16*>(base)[dst + i] = __float2bfloat16_rn(val);
  };
  const void* w = g.w;
  const int w_code = g.w_code;
  const float p = static_cast<float>(p_int);
  const int half = n_rot / 2;
  float wv[kPer], sn[kPer], cs[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = lane + 32 * u;
    const bool in = i < hd && which < 2;
    wv[u] = in ? load_any(w, w_code, i) + offset : 0.0f;
    sn[u] = 0.0f, cs[u] = 1.0f;
    if (in && i < n_rot) {
      const int pair = neox ? (i < half ? i : i - half) : i / 2;
      sincosf(p * inv_freq[pair], &sn[u], &cs[u]);
      cs[u] *= attn_factor, sn[u] *= attn_factor;
    }
  }
  pdl_enter();
  if (which == 2) {  // v: stored as it is
#pragma unroll
    for (int u = 0; u < kPer; ++u)
      if (lane + 32 * u < hd) store(lane + 32 * u, to_f(r[lane + 32 * u]));
    return;
  }
  float xv[kPer];
#pragma unroll
  for (int u = 0; u < kPer; ++u) xv[u] = lane + 32 * u < hd ? to_f(r[lane + 32 * u]) : 0.0f;
  float ss = 0.0f;
#pragma unroll
  for (int u = 0; u < kPer; ++u) ss += xv[u] * xv[u];
  ss = warp_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(hd) + eps);
#pragma unroll
  for (int u = 0; u < kPer; ++u)
    if (lane + 32 * u < hd) head[warp][lane + 32 * u] = xv[u] * inv * wv[u];
  __syncwarp();
#pragma unroll
  for (int u = 0; u < kPer; ++u) {
    const int i = lane + 32 * u;
    if (i >= hd) break;
    float out = head[warp][i];
    if (i < n_rot) {
      const int pair = neox ? (i < half ? i : i - half) : i / 2;
      const bool lead = neox ? i < half : (i % 2 == 0);
      const int i0 = neox ? pair : 2 * pair, i1 = neox ? pair + half : 2 * pair + 1;
      const float a0 = head[warp][i0], a1 = head[warp][i1];
      out = lead ? a0 * cs[u] - a1 * sn[u] : a1 * cs[u] + a0 * sn[u];
    }
    const T o = from_f<T>(out);
    r[i] = o;
    store(i, to_f(o));  // the cache holds what kv_write would copy from k
  }
}

}  // namespace
}  // namespace cuda

namespace cuda {
namespace {

/** One norm_rope operand: x an activation whose rows are whole heads at `positions`, w [head_dim]. */
void check_norm_rope(const char* op, const char* x_name, const Tensor& x, const Tensor& w, const RopeParams& p,
                     const Tensor& positions) {
  check_act(op, x_name, x);
  check_dev(op, "w", w);
  check_dtype(op, "positions", positions, {DType::I32});
  check_dtype(op, "inv_freq", p.inv_freq, {DType::F32});
  op_checks::rope(p, x, positions);
  if (w.numel() != p.head_dim)
    fail(ErrorCode::kInvalidArgument, "{}: weight {} must have head_dim {} elements", op, w.str(), p.head_dim);
}

}  // namespace
}  // namespace cuda

void CudaOps::norm_rope(const RmsNormParams& np, const Tensor& w, const RopeParams& p, Tensor x,
                        const Tensor& positions) {
  cuda::check_norm_rope("norm_rope", "x", x, w, p, positions);
  if (p.head_dim > cuda::kNrMaxHeadDim) return Ops::norm_rope(np, w, p, x, positions);  // unfused
  const int64_t n_head = x.cols() / p.head_dim, rows = x.rows() * n_head;
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kNrWarps - 1) / cuda::kNrWarps);
  FT_DISPATCH_ACT("norm_rope", "x", x.dtype, {
    const cuda::NrHeads<T> a{x.ptr<T>(), w.data, cuda::float_code("norm_rope", "w", w.dtype), rows, n_head};
    const cuda::NrHeads<T> none{nullptr, nullptr, 0, 0, 1};
    cuda::launch_pdl(cuda::norm_rope_kernel<T>, blocks, cuda::kNrWarps * 32, 0, stream_,
        a, none, none, cuda::KvStore{}, np.eps, np.weight_offset, positions.ptr<int32_t>(), p.inv_freq.ptr<float>(),
        p.head_dim, p.n_rot, p.mode == RopeMode::kNeox, p.attn_factor);
  });
}

void CudaOps::qk_norm_rope_store(const RmsNormParams& np, const Tensor& wq, const Tensor& wk, const RopeParams& p,
                                 Tensor q, Tensor k, const Tensor& v, const BatchInfo& batch, KvLayer kv) {
  // Quantized pages (fp8 / q8_0): norm_rope, then kv_write's quantizer (this kernel stores float rows).
  if (kv.quantized()) return Ops::qk_norm_rope_store(np, wq, wk, p, q, k, v, batch, kv);
  const Tensor& positions = batch.positions;
  cuda::check_kv_write("qk_norm_rope_store", batch, k, v, kv);
  cuda::check_same_shape("qk_norm_rope_store", "v", v, k);  // one kernel stores both: equal widths
  cuda::check_same_shape("qk_norm_rope_store", "kv.v", kv.v, kv.k);
  cuda::check_norm_rope("qk_norm_rope_store", "q", q, wq, p, positions);
  cuda::check_norm_rope("qk_norm_rope_store", "k", k, wk, p, positions);
  cuda::check_same_dtype("qk_norm_rope_store", "k", k, q);
  const int64_t n_tok = batch.n_tokens, hk = k.cols() / p.head_dim;
  if (kv.k.dim(2) != hk || kv.k.dim(3) != p.head_dim || k.rows() != n_tok)
    fail(ErrorCode::kInvalidArgument, "qk_norm_rope_store: kv.k {} must be [pages, page_size, {}, {}] for k {}",
         kv.k.str(), hk, p.head_dim, k.str());
  if (p.head_dim > cuda::kNrMaxHeadDim) return Ops::qk_norm_rope_store(np, wq, wk, p, q, k, v, batch, kv);  // unfused
  const int64_t hq = q.cols() / p.head_dim;
  const int64_t rows = n_tok * (hq + 2 * hk);
  if (rows == 0) return;
  cuda::KvStore st;
  st.kc = kv.k.data, st.vc = kv.v.data, st.f32 = kv.k.dtype == DType::F32;
  st.page_size = kv.k.dim(1), st.n_pages = kv.k.dim(0), st.n_seqs = batch.n_seqs;
  st.seq = batch.seq_index.ptr<int32_t>(), st.bt = batch.block_tables.ptr<int32_t>(), st.max_blocks = batch.max_blocks;
  const unsigned blocks = static_cast<unsigned>((rows + cuda::kNrWarps - 1) / cuda::kNrWarps);
  FT_DISPATCH_ACT("qk_norm_rope_store", "q", q.dtype, {
    const cuda::NrHeads<T> a{q.ptr<T>(), wq.data, cuda::float_code("qk_norm_rope_store", "wq", wq.dtype), n_tok * hq, hq};
    const cuda::NrHeads<T> b{k.ptr<T>(), wk.data, cuda::float_code("qk_norm_rope_store", "wk", wk.dtype), n_tok * hk, hk};
    const cuda::NrHeads<T> c{const_cast<T*>(v.ptr<T>()), nullptr, 0, n_tok * hk, hk};
    cuda::launch_pdl(cuda::norm_rope_kernel<T>, blocks, cuda::kNrWarps * 32, 0, stream_,
        a, b, c, st, np.eps, np.weight_offset, positions.ptr<int32_t>(), p.inv_freq.ptr<float>(), p.head_dim, p.n_rot,
        p.mode == RopeMode::kNeox, p.attn_factor);
  });
}

}  // namespace ft
