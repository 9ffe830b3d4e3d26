#pragma once
// Tensor-core helpers shared by the mma.sync kernels (attention_tc.cu, attention_mla_tc.cu,
// moe_grouped_gemm.cu), and the cp.async copies that feed them.
// Fragment layouts of mma.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"): with g = lane / 4
// and t = lane % 4, A (16 x 16, row-major) registers hold rows g / g + 8, columns 2t, 2t+1 (+ 8);
// B (16 x 8) registers hold rows (k) 2t, 2t+1 (+ 8) of column (n) g; C (16 x 8, f32) holds rows g /
// g + 8, columns 2t, 2t+1.
#include <cuda_bf16.h>

#include <cstdint>

namespace ft::cuda {

/** Two floats rounded to bf16 and packed into one register, `lo` in the low half (lower column). */
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

/** c += a (16x16 bf16, row-major fragment) x b (16x8 bf16, column fragment b0, b1), fp32 accumulators. */
__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/** Two 8x8 b16 matrices from shared memory, transposed (ldmatrix .trans): lanes 0-7 give the row
 *  addresses of the first, lanes 8-15 of the second (16-byte aligned rows). With rows = k and
 *  columns = n of a row-major [k][n] tile, r0 / r1 are the B fragment of mma.m16n8k16 for k 0-7 / 8-15. */
__device__ __forceinline__ void ldmatrix_x2_trans(uint32_t& r0, uint32_t& r1, const void* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];\n" : "=r"(r0), "=r"(r1) : "r"(a));
}

/** Four 8x8 b16 matrices from shared memory (ldmatrix .x4): lane i gives the address of row i % 8 of
 *  matrix i / 8 (16-byte aligned rows). For a row-major 16 x 16 A tile at (row0, col0), lane i passing
 *  row0 + i % 16, col0 + (i / 16) * 8 yields the A fragment of mma.m16n8k16 in r[0..3]. */
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  const uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

/** 16 bytes global -> shared without registers (cp.async.cg, sm_80+): src_bytes of them are read from
 *  `src` (16 or 0; the rest of the 16 are zero-filled). Complete after cp_async_wait. */
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int src_bytes) {
  const uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
}
/** Closes the thread's group of cp.async copies issued since the last commit. */
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
/** Waits until at most N of the thread's committed groups are still in flight. */
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

}  // namespace ft::cuda
