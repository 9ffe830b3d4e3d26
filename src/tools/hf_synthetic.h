#pragma once
// The Hugging Face layout of a synthetic model (tools/synthetic_checkpoint.h) for the architectures
// FreeToken loads from safetensors only (deepseek_v4, qwen4_exp): a preset with ModelPreset::hf_config gets a
// config.json built from it (the preset's real fields, plus the per-layer lists for the requested layer
// count) and the tensors the model's loader reads, under their transformers / upstream names.
//
// DeepSeek-V4 (model/deepseek_v4.cpp): model.embed_tokens, model.norm, head, model.hc_head.{hc_fn, hc_base,
// hc_scale}; per layer hc_{attn,ffn}_{fn,base,scale}, attn_norm, ffn_norm, attn.{wq_a, q_norm, wq_b, wkv,
// norm, wo_a (a float type), wo_b, attn_sink}, attn.compressor.{wkv, wgate, ape, norm} (not on sliding_attention
// layers) and on CSA layers attn.indexer.{compressor.*, wq_b, weights_proj}; ffn.gate (router, F32) with ffn.gate.tid2eid (I32 [V, k],
// k distinct experts a token, hash_moe layers) or ffn.gate.bias (F32 zeros, moe layers),
// ffn.experts.{e}.{w1, w3, w2} and ffn.shared_experts.{w1, w3, w2}. The hyper-connections' base and
// scale are zeros (every stream weighted alike), attention sinks and the compressors' ape zeros.
// Layer schedule: layer_types as upstream's compress_ratios [0, 0, 4, 128, 4, 128, ...] (ratio 0:
// sliding_attention, the window alone); the first num_hash_layers layers hash_moe, the rest moe.
//
// Qwen4-Exp (model/qwen4_exp.cpp; the text model, model_type qwen4_exp_text): model.embed_tokens, lm_head,
// model.hyper_connection_mixer.{hc_norm, input_mix_weight_down, input_mix_weight_up}; per layer
// {attn,mlp}_hyper_connection.{hc_norm, input_mix_weight_down, input_mix_weight_up, block_inject_weight},
// Gated DeltaNet layers linear_attn.{in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d, A_log, dt_bias,
// norm, out_proj} (Qwen3.5's separate projections), every full_attention_interval-th layer QSA attention
// self_attn.{q_proj (with the output gate rows), k_proj, v_proj, o_proj, q_norm, k_norm,
// indexer.{index_qk_proj, q_layernorm, k_layernorm}}; mlp.{gate, experts.{e}.{gate,up,down}_proj,
// shared_expert.{gate,up,down}_proj, shared_expert_gate}; the PLE layers (ple_layer_ids, 1-based; those
// within the layer count) ple.{key_proj, value_proj, conv1d, norm_key, norm_query, norm_conv} and the
// n-gram table ple.ple_embedding.ngram_embedding.weight [rows of its heads' primes, ple_embed_dim / heads]
// as one tensor of zeros that is never written (51B values at the real shapes: host pages stay unmapped
// until a row is read). Norm weights stored as offsets from 1 are zeros.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/model_presets.h"

namespace ft {

/** How a synthetic tensor's values are made (SyntheticCheckpoint::generate). */
enum class SynthFill : uint8_t {
  kOnes, kZeros, kMatrix, kOutProj, kEmbedding, kRouter, kMinusOnes,
  kHashRoutes,  // I32 [V, k]: row t holds k distinct expert ids of [0, n_expert)
  kLazyZeros,   // zeros never written: the pages stay unmapped until read (Qwen4-Exp's n-gram table)
};

/** What a synthetic tensor is stored in: the weight type, the experts' type, the embedding's, a float type
 *  (kFloat: the weight type when F32/F16/BF16, else BF16, for ops that read float weights only: V4's
 *  head_matmul), or a fixed type. */
enum class SynthStore : uint8_t { kWeight, kExpert, kEmbedding, kFloat, kF32, kI32 };

struct SynthTensor {
  std::string name;
  std::vector<int64_t> shape;  // row-major
  SynthFill fill = SynthFill::kMatrix;
  SynthStore store = SynthStore::kWeight;
  int32_t layer = -1;          // the decoder layer it belongs to (-1: none)
};

/** The config.json of preset `p` (ModelPreset::hf_config) for a model of `n_layer` layers:
 *  num_hidden_layers and the per-layer lists set. Throws ft::Error(kInvalidArgument) for a preset
 *  without hf_config or an invalid one. */
nlohmann::json hf_synthetic_config(const ModelPreset& p, int64_t n_layer);

/** The tensors of `p`'s model of `n_layer` layers in the Hugging Face layout its loader reads. Throws
 *  ft::Error(kUnsupported) for an architecture without a layout here. */
std::vector<SynthTensor> hf_synthetic_tensors(const ModelPreset& p, int64_t n_layer);

/** Parameters of `p`'s model of `n_layer` layers (0: the preset's) from hf_synthetic_tensors: every
 *  tensor, or with `active` the routed experts at n_expert_used of n_expert and no embedding or n-gram
 *  table (a token reads a few rows of them). */
int64_t hf_synthetic_params(const ModelPreset& p, int64_t n_layer, bool active);

}  // namespace ft
