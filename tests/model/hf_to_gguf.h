#pragma once
// A Hugging Face checkpoint folder (config.json + model.safetensors) written as the GGUF file
// llama.cpp's convert_hf_to_gguf.py writes for it, with the project's own GgufWriter: llama.cpp's
// tensor names (gguf-py constants.py TENSOR_NAMES), its metadata keys and values (the converter's
// TextModel.set_gguf_parameters plus the model class's), and its tensor types (1-D tensors, norms
// and ffn_gate_inp in F32; matrices in the out type, Q8_0 falling back to F16 for rows that are not
// whole blocks). Used by the tests until converted files sit in shared/fixtures/gguf/; its eventual
// home is src/tools/.
//
// Architectures (HF class -> GGUF general.architecture):
//   DeepseekV3ForCausalLM -> deepseek2   (conversion/deepseek.py DeepseekV2Model: MLA as MQA,
//                                          head_count_kv 1, key_length = kv_lora_rank + qk_rope,
//                                          value_length = kv_lora_rank, *_mla the per-head widths;
//                                          kv_b_proj split into attn_k_b [n_head, kv_lora_rank, qk_nope]
//                                          and attn_v_b [n_head, v_head_dim, kv_lora_rank], or kept as
//                                          attn_kv_b (older converters); MTP layers not written)
//   Glm4MoeForCausalLM    -> glm4moe     (conversion/glm.py Glm4MoeModel: block_count counts the
//                                          num_nextn_predict_layers MTP blocks, post_attention_layernorm
//                                          is blk.N.post_attention_norm)
//   MiniMaxM2ForCausalLM  -> minimax-m2  (conversion/minimax.py MiniMaxM2Model: expert width =
//                                          intermediate_size, rope.dimension_count = rotary_dim)
//   GptOssForCausalLM     -> gpt-oss     (conversion/gpt_oss.py GptOssModel, BF16 experts: gate_up_proj
//                                          de-interleaved into ffn_gate_exps / ffn_up_exps and transposed
//                                          output-major, down_proj transposed, their biases split alike
//                                          (2-D biases take the matrix type); self_attn.sinks ->
//                                          attn_sinks.weight; post_attention_norm; expert width =
//                                          intermediate_size; attention.sliding_window, no pattern key
//                                          (llama.cpp's default period 2); no gating key)
// No Q/K permutation applies to these architectures (llama.cpp runs them with NeoX RoPE, and
// DeepSeek's rope_interleave as normal-mode RoPE on the unpermuted rows).
#include <set>
#include <string>

#include "tensor/dtype.h"

namespace ft::testing {

/** How a DeepSeek kv_b_proj [n_head * (qk_nope + v_head_dim), kv_lora_rank] is written. */
enum class MlaKvB {
  kSplit,  // attn_k_b [n_head, kv_lora_rank, qk_nope] (W_UK transposed per head) + attn_v_b [n_head, v_head_dim, kv_lora_rank]
  kFused,  // attn_kv_b as stored (llama.cpp converters before the absorbed-MLA split)
};

struct HfToGgufOptions {
  /** Type of the matrices: BF16 (keeps a bf16 checkpoint's values), F16, F32 or Q8_0 (rows that
   *  are not a multiple of 32 fall back to F16, as gguf-py does). */
  DType matrix_type = DType::BF16;
  MlaKvB kv_b = MlaKvB::kSplit;
  /** Folder with tokenizer.json (+ tokenizer_config.json): written as tokenizer.ggml.* the way
   *  llama.cpp's _set_vocab_gpt2 writes a byte-level BPE (model "gpt2", pre `tokenizer_pre`).
   *  Empty: no tokenizer keys. */
  std::string tokenizer_dir;
  std::string tokenizer_pre = "qwen2";
  /** glm4moe: the checkpoint has no MTP tensors, so write a stand-in NextN block (the last decoder
   *  layer's weights under blk.{num_hidden_layers}, plus nextn.eh_proj [H, 2H] and nextn.enorm /
   *  hnorm / shared_head_norm [H]) so the file has the block its block_count counts. */
  bool synth_mtp_block = true;
  /** Metadata keys left out of the file (tests of a missing key). */
  std::set<std::string> omit_keys;
};

/** What was written. */
struct HfToGgufResult {
  std::string arch;       // general.architecture
  int64_t n_tensors = 0;  // tensors in the file
  int64_t block_count = 0;
};

/** Converts the HF folder `hf_dir` (config.json `architectures[0]` one of the four above,
 *  model.safetensors with F32/F16/BF16 tensors) into the GGUF file `out_path`. Every tensor of the
 *  checkpoint must map to a GGUF name (DeepSeek MTP layers are dropped, as llama.cpp drops them).
 *  Throws ft::Error: kUnsupported for another architecture or matrix type, kInvalidFile naming a
 *  config field or tensor that is missing or cannot be mapped, kIo if the file cannot be written. */
HfToGgufResult convert_hf_to_gguf(const std::string& hf_dir, const std::string& out_path,
                                  const HfToGgufOptions& options = {});

}  // namespace ft::testing
