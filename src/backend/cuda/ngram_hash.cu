// ngram_hash: Qwen4-Exp's hashed n-gram ids (ops.h; CPU reference backend/cpu/ngram_hash.cpp, after
// transformers' Qwen4ExpTextNGramEmbedding). One block per sequence, one thread per token row: each
// reads its n - 1 predecessors from the step's tokens or the slot's history (EOS before position 0),
// then, after every row has read the old history, the first n - 1 threads write the new one. Integer
// arithmetic as the CPU's (int64 products wrapping mod 2^64, C++ truncating %), so ids are equal.
// Sequences with an out-of-range state slot are skipped (the CPU backend throws).
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_ops.h"

namespace ft {
namespace cuda {
namespace {

constexpr int kMaxNgram = 16;

/** a * b wrapping modulo 2^64 (defined behaviour; the bits of the CPU's int64 product). */
__device__ __forceinline__ int64_t wrap_mul(int64_t a, int64_t b) {
  return static_cast<int64_t>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
}

__global__ void ngram_hash_kernel(const int32_t* tokens, const int64_t* mult, const int64_t* sizes,
                                  const int64_t* offsets, int32_t* history, int32_t* ids, const int32_t* seq_start,
                                  const int32_t* positions, const int32_t* slots, int64_t n_slots, int n, int heads,
                                  int eos) {
  const int s = blockIdx.x;
  const int t0 = seq_start[s], t1 = seq_start[s + 1];
  const int64_t slot = slots[s];
  if (t1 <= t0 || slot < 0 || slot >= n_slots) return;
  const int ctx = n - 1, nt = t1 - t0, nh = ctx * heads;
  int32_t* hist = history + slot * ctx;
  const bool fresh = positions[t0] <= 0;
  // seq[i] for i in [0, ctx + nt): the old history (EOS when fresh), then this step's tokens.
  auto seq = [&](int i) -> int64_t { return i >= ctx ? tokens[t0 + i - ctx] : (fresh ? eos : hist[i]); };
  for (int r = threadIdx.x; r < nt; r += blockDim.x) {
    const int i = ctx + r;
    int64_t shifted[kMaxNgram];
    shifted[0] = seq(i);
    bool broken = false;
    for (int j = 1; j < n; ++j) {
      const int64_t v = seq(i - j);
      broken = broken || v == eos;
      shifted[j] = broken ? eos : v;
    }
    int64_t mixed = wrap_mul(shifted[0], mult[0]);
    int32_t* out = ids + static_cast<int64_t>(t0 + r) * nh;
    for (int g = 2; g <= n; ++g) {
      mixed ^= wrap_mul(shifted[g - 1], mult[g - 1]);
      for (int k = 0; k < heads; ++k) {
        const int h = (g - 2) * heads + k;
        const int64_t sz = sizes[h];
        out[h] = sz > 0 ? static_cast<int32_t>(mixed % sz + offsets[h]) : -1;
      }
    }
  }
  // The new history: the last ctx entries of seq (read before any thread writes).
  int32_t keep = 0;
  const bool writer = static_cast<int>(threadIdx.x) < ctx;
  if (writer) keep = static_cast<int32_t>(seq(nt + static_cast<int>(threadIdx.x)));
  __syncthreads();
  if (writer) hist[threadIdx.x] = keep;
}

}  // namespace
}  // namespace cuda

void CudaOps::ngram_hash(const NgramHashParams& p, const BatchInfo& batch, const Tensor& tokens, const Tensor& mult,
                         const Tensor& sizes, const Tensor& offsets, Tensor history, Tensor ids) {
  const char* op = "ngram_hash";
  cuda::check_batch(op, batch);
  cuda::check_dtype(op, "tokens", tokens, {DType::I32});
  cuda::check_dtype(op, "mult", mult, {DType::I64});
  cuda::check_dtype(op, "sizes", sizes, {DType::I64});
  cuda::check_dtype(op, "offsets", offsets, {DType::I64});
  cuda::check_dtype(op, "history", history, {DType::I32});
  cuda::check_dtype(op, "ids", ids, {DType::I32});
  cuda::check_dtype(op, "state_slots", batch.state_slots, {DType::I32});
  const int64_t T = batch.n_tokens, n = p.n, ctx = n - 1, nh = ctx * p.heads;
  if (n < 2 || n > cuda::kMaxNgram || p.heads < 1 || tokens.numel() != T || !mult.has_shape({n}) ||
      !sizes.has_shape({nh}) || !offsets.has_shape({nh}) || history.ndim != 2 || history.dim(1) != ctx ||
      !ids.has_shape({T, nh}) || batch.state_slots.numel() < batch.n_seqs)
    fail(ErrorCode::kInvalidArgument, "{}: tokens {}, mult {}, sizes {}, offsets {}, history {}, ids {} do not fit "
         "n-grams of up to {} tokens (2 .. {} here) with {} heads each", op, tokens.str(), mult.str(), sizes.str(),
         offsets.str(), history.str(), ids.str(), n, cuda::kMaxNgram, p.heads);
  if (T == 0 || batch.n_seqs == 0) return;
  cuda::ngram_hash_kernel<<<static_cast<unsigned>(batch.n_seqs), 128, 0, stream_>>>(
      tokens.ptr<int32_t>(), mult.ptr<int64_t>(), sizes.ptr<int64_t>(), offsets.ptr<int64_t>(), history.ptr<int32_t>(),
      ids.ptr<int32_t>(), batch.seq_start.ptr<int32_t>(), batch.positions.ptr<int32_t>(),
      batch.state_slots.ptr<int32_t>(), history.dim(0), static_cast<int>(n), p.heads, p.eos);
  FT_CUDA_LAUNCH_CHECK();
}

}  // namespace ft
