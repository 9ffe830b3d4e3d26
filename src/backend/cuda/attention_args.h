#pragma once
// The tensors of one Ops::attention call as device pointers and sizes, shared by the attention
// kernels (attention.cu, attention_decode.cu, attention_tc.cu). Plain data: passed to kernels by value.
#include <cstdint>

namespace ft::cuda {

/** How KV pages hold their values (AttnTensors::kv_form; the kernels' KV template argument):
 *  F32 / BF16 elements (kv_f32 tells which), or codes plus scales (kv_quant.cuh). */
constexpr int kKvFloat = 0;
constexpr int kKvFp8 = 1;  // --kv-cache-dtype fp8: E4M3 codes, one F32 scale a head row
constexpr int kKvQ8 = 2;   // --kv-cache-dtype q8_0: int8 codes, one F16 scale per 32 values of a head row

struct AttnTensors {
  const void* q = nullptr;   // [T, H * D], dtype code q_code (float_code)
  int q_code = 0;
  void* out = nullptr;       // [T, H * D] F32 (out_f32) or BF16
  bool out_f32 = false;
  const void* k = nullptr;   // [n_pages, page_size, G, D] F32 (kv_f32) or BF16; the fused decode kernel
                             // (attention_decode.cu) also writes the new token's rows of k and v
  const void* v = nullptr;
  bool kv_f32 = false;
  /** kKvFloat, or kKvFp8 / kKvQ8: k and v then hold one-byte codes and these their scales,
   *  [n_pages, page_size, G, kv_sph] (KvLayer::k_scale / ::v_scale). */
  int kv_form = kKvFloat;
  const void* k_scale = nullptr;
  const void* v_scale = nullptr;
  int kv_sph = 0;  // scales a head row: 1 (fp8), ceil(D / 32) (q8_0)
  int64_t T = 0;
  int H = 0, G = 0, D = 0;
  float scale = 0.0f;
  int window = 0;            // > 0: sliding window
  /** F32 [H] per query head, or null: the head's sink logit joins the softmax's denominator once
   *  (AttentionParams::sinks; not scaled, natural-log units) and contributes no value. */
  const float* sinks = nullptr;
  int64_t page_size = 0, n_pages = 0;
  const int32_t* pos = nullptr;  // [T]
  const int32_t* seq = nullptr;  // [T]
  int64_t n_seqs = 0;
  const int32_t* bt = nullptr;   // [n_seqs, max_blocks]
  int max_blocks = 0;
};

}  // namespace ft::cuda
