#pragma once
// SyntheticCheckpoint: a model with the real shapes of a preset (tools/model_presets.h) and
// deterministic random weights (`--dummy-weights --model-preset NAME`), for benchmarks. It looks
// exactly like a GGUF file to the loader: llama.cpp tensor names, `{arch}.*` metadata and a
// byte-level tokenizer of the preset's vocabulary size, so Engine works unchanged; write_gguf()
// writes the very same bytes as a GGUF file that llama.cpp (and `ft bench --model`) can load.
//
// Contents (llama.cpp's names; shapes row-major, GGUF lists them reversed):
//   token_embd [V, H]; output_norm [H], output [V, H]; per layer attn_norm and ffn_norm [H]
//   (post_attention_norm for glm4moe, as llama.cpp names it), then attention:
//     GQA: attn_q [nh*D, H], attn_k / attn_v [nkv*D, H], attn_output [H, nh*D]; with attn_bias
//          attn_q/k/v.bias (F32 zeros); QK-norm attn_q_norm / attn_k_norm [D] per head (qwen3moe)
//          or [nh*D] / [nkv*D] over the whole projection (minimax-m2)
//     MLA (deepseek2): attn_q_a [qr, H] + attn_q_a_norm [qr] + attn_q_b [nh*(nope+rope), qr] (or
//          attn_q [nh*(nope+rope), H] without q LoRA), attn_kv_a_mqa [R+rope, H], attn_kv_a_norm [R],
//          attn_k_b [nh, R, nope] and attn_v_b [nh, v, R] (BF16 for a block weight type: the loader
//          dequantizes them per head), attn_output [H, nh*v]
//   FFN: the first ModelPreset::dense_layers(n_layer) layers dense ffn_gate / ffn_up [n_ff, H],
//     ffn_down [H, n_ff]; the others ffn_gate_inp (router, F32) [E, H], exp_probs_b.bias (F32 zeros)
//     [E] for a router with a selection bias (and every deepseek2 preset: the loader requires it),
//     ffn_gate_exps/ffn_up_exps [E, F, H], ffn_down_exps [E, H, F], and with shared experts
//     ffn_gate_shexp / ffn_up_shexp [S*F, H], ffn_down_shexp [H, S*F].
//   qwen3next (ModelPreset::full_attn_interval): linear-attention layers hold attn_qkv [C, H], attn_gate
//   [Hv*dv, H], ssm_ba [2*Hv, H], ssm_conv1d [C, K] (F32), ssm_a [Hv] (-1), ssm_dt.bias [Hv] (0),
//   ssm_norm [dv], ssm_out [H, Hv*dv] in place of attention; attn_q is [2*nh*D, H] (query and output
//   gate rows per head) and the shared expert has ffn_gate_inp_shexp [H] (zeros).
//   Norm weights are F32 ones; routers and biases F32; every other matrix is in the weight type (a
//   matrix whose row length is not a whole number of its blocks falls back to Q8_0, or F16); the
//   embedding table is the weight type when quant/quantize_row can write it (F32, F16, BF16, Q8_0,
//   Q4_0, Q4_K), else Q8_0. FP8 / NVFP4 (F8_E4M3_B32, NVFP4_G64; rows of 16k values take the B16 / G16
//   forms) keep the embedding and output in BF16, as those checkpoints do; GGUF cannot hold them
//   (write_gguf refuses). Matrices have RMS 1/sqrt(row length); the residual branches' output
//   projections (attn_output, ffn_down, ffn_down_exps, ffn_down_shexp) are scaled by 0.2/sqrt(n_layer)
//   so the residual stream stays close to the token embedding. gpt-oss (ModelPreset::oai_moe) adds
//   attn_output.bias, attn_sinks [nh] (F32 zeros), ffn_gate_inp.bias [E] and ffn_{gate,up}_exps.bias
//   [E, F] / ffn_down_exps.bias [E, H] (F32 zeros), names the pre-FFN norm post_attention_norm, and
//   stores the routed experts in SyntheticSpec::expert_type (MXFP4 by default). Metadata: llama.cpp's `{arch}.*` keys
//   (for MLA its convention: head_count_kv 1, key_length kv_lora_rank + qk_rope, value_length
//   kv_lora_rank, key_length_mla / value_length_mla the per-head widths), leading_dense_block_count,
//   expert_shared_count, expert_gating_func, expert_weights_norm / _scale, expert_group_count /
//   _used_count and YaRN's rope.scaling.* where the preset has them. No MTP (next-n) layers.
// Presets with ModelPreset::hf_config (deepseek_v4) are in the Hugging Face layout instead
// (tools/hf_synthetic.h): format() "safetensors", metadata {"config": config.json}, upstream names.
//
// Router skew S (Zipf routing). Hidden dimension 0 carries a constant: every embedding row has
// x[0] = C = sqrt(H - 1) (the other entries have RMS 1) and every output projection has row 0 = 0,
// so x[0] = C in every layer and, after RMSNorm, h[0] ~ sqrt(H / 2) while |h[1:]|^2 ~ H / 2. Layer
// l's router row e is then W[e, 1:] random with RMS s / sqrt(H / 2) (s = pi / sqrt(6), the standard
// deviation of a standard Gumbel variable) and W[e, 0] = -S ln(rank_l(e)) / sqrt(H / 2), where
// rank_l is a random permutation of 1..E per layer (expert_ranks()). A token's router logits are
// thus -S ln(rank) + noise of standard deviation s: with Gumbel noise, top-1 routing picks an
// expert with probability exactly proportional to rank^-S (the Gumbel-max trick) and top-k draws
// without replacement from that Zipf law; the noise here is close to Gaussian, so frequencies
// follow rank^-S approximately (the head is a little flatter). S = 0 routes uniformly.
// A sigmoid router picks the same top-k (sigmoid is monotonic and the selection bias is zero);
// group-limited routing (deepseek-v3: the best 4 of 8 groups of 32 experts) draws within the groups
// it keeps, so the law holds only roughly there.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tools/model_presets.h"
#include "formats/checkpoint.h"
#include "formats/gguf_value.h"
#include "tensor/tensor.h"

namespace ft {

struct SyntheticSpec {
  std::string preset = "tiny-moe";   // --model-preset
  DType weight_type = DType::BF16;   // --weight-type
  /** --expert-weight-type: the routed experts' type; unset: the preset's upstream expert type
   *  (ModelPreset::expert_type, MXFP4 for gpt-oss) if it has one, else weight_type. */
  std::optional<DType> expert_type;
  int64_t n_layer = 0;               // --dummy-layers (0: the preset's)
  double router_skew = 0.0;          // --dummy-router-skew S >= 0
  uint64_t seed = 0;                 // --seed
  int threads = 0;                   // generator threads (0: all cores)
};

class SyntheticCheckpoint final : public Checkpoint {
 public:
  /** Plans and generates every tensor into one host buffer (multithreaded; the bytes depend only on
   *  the spec, not on the thread count). Throws ft::Error: kInvalidArgument for an unknown preset,
   *  a negative layer count or skew, kUnsupported for a preset the engine cannot run or a weight type
   *  synthetic_type_supported() rejects, kOutOfMemory (naming the bytes and MemAvailable) when the
   *  model does not fit in host memory. */
  explicit SyntheticCheckpoint(const SyntheticSpec& spec);

  /** "gguf", or "safetensors" for a preset in the Hugging Face layout (ModelPreset::hf_config). */
  std::string format() const override { return preset_->hf_config.empty() ? "gguf" : "safetensors"; }
  /** "synthetic:<preset>:<type>:<layers>L:skew<S>:seed<N>". */
  const std::string& path() const override { return path_; }
  const std::vector<TensorInfo>& tensors() const override { return tensors_; }
  const nlohmann::json& metadata() const override { return metadata_; }

  const SyntheticSpec& spec() const { return spec_; }
  const ModelPreset& preset() const { return *preset_; }
  int64_t n_layer() const { return n_layer_; }
  /** The metadata as typed GGUF key/values (what write_gguf writes). */
  const std::vector<GgufKV>& kvs() const { return kvs_; }
  /** Layer `layer`'s expert ranks: rank[e] in 1..E, 1 = the expert routed most often when S > 0.
   *  Throws kInvalidArgument for a layer out of range. */
  const std::vector<int32_t>& expert_ranks(int64_t layer) const;
  /** Seconds the generation took. */
  double generate_seconds() const { return generate_seconds_; }

  /** Writes this checkpoint as a GGUF file (same metadata, tensors and bytes; streamed, no second
   *  copy in memory). Throws ft::Error(kIo) when the file cannot be written, kInvalidArgument after
   *  release() (the released bytes are gone), kUnsupported for a Hugging Face layout preset. */
  void write_gguf(const std::string& file) const;
  /** Returns the whole pages inside the range to the OS (madvise MADV_DONTNEED; they read as zeros
   *  afterwards): a 130 GB model whose experts were copied into expert banks then needs its memory
   *  once, not twice. */
  void release(const void* data, int64_t bytes) override;
  bool releases_memory() const override { return true; }
  /** Bytes returned to the OS by release(). */
  int64_t released_bytes() const { return released_bytes_.load(); }

 private:
  void plan();
  void generate();

  SyntheticSpec spec_;
  const ModelPreset* preset_ = nullptr;
  int64_t n_layer_ = 0;
  std::string path_;
  std::vector<GgufKV> kvs_;
  nlohmann::json metadata_;
  std::vector<TensorInfo> tensors_;
  std::vector<uint8_t> kinds_;                 // per tensor: how it is generated
  std::vector<int64_t> offsets_;               // per tensor: byte offset in storage_
  std::vector<std::vector<int32_t>> ranks_;    // [layer][expert]
  Buffer storage_;
  Buffer lazy_;  // tensors never written (hf_synthetic.h kLazyZeros): MAP_NORESERVE zero pages
  double generate_seconds_ = 0;
  std::atomic<int64_t> released_bytes_{0};  // release() runs on several bank-fill threads at once
};

/** What a SyntheticCheckpoint of `spec` holds, planned without generating (no weights allocated). */
struct SyntheticLayout {
  int64_t n_layer = 0;              // layers of the model
  std::vector<GgufKV> kvs;          // metadata as written to GGUF
  nlohmann::json metadata;          // the same as Checkpoint::metadata() gives it
  std::vector<TensorInfo> tensors;  // names, dtypes, shapes and bytes; data null
  int64_t bytes = 0;                // host bytes of the generated weights (tensors at 256-byte alignment)
};

/** The layout of `spec`'s model. Throws what SyntheticCheckpoint(spec) throws, except kOutOfMemory. */
SyntheticLayout synthetic_layout(const SyntheticSpec& spec);

/** Throws ft::Error(kUnsupported) naming a tensor of `spec`'s model whose type GGUF cannot hold (FP8 and
 *  NVFP4: F8_E4M3_B32/B16, NVFP4_G64/G16), before anything is generated; what synthetic_layout throws
 *  for a bad spec. write_gguf makes the same check. */
void require_synthetic_gguf(const SyntheticSpec& spec);

/** The routed experts' type of `spec` (SyntheticSpec::expert_type, resolved against the preset). */
DType synthetic_expert_type(const SyntheticSpec& spec);

/** The weight type named `name` ("q4_k", "BF16", ...) for `flag` (--weight-type, --expert-weight-type), with
 *  the checkpoint formats' names: "fp8" is F8_E4M3_B32 (what the loader stores a DeepSeek / Qwen FP8
 *  checkpoint's [128, 128]-block weights as), "nvfp4" NVFP4_G64 (a ModelOpt NVFP4 checkpoint's weights as
 *  stored; GGUF's own NVFP4 is not a synthetic type); F8_E4M3_B16 and NVFP4_G16 by name. Case-insensitive.
 *  Throws ft::Error(kInvalidArgument) listing the supported types for an unknown or unsupported name. */
DType parse_synthetic_weight_type(const std::string& name, const char* flag = "--weight-type");

}  // namespace ft
