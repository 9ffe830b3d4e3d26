#include "tools/synthetic_checkpoint.h"

#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <numbers>
#include <optional>
#include <thread>

#include <fmt/format.h>

#include "tools/hf_synthetic.h"
#include "tools/synthetic_weights.h"
#include "formats/gguf_writer.h"
#include "moe/host_memory.h"
#include "quant/quant.h"
#include "tokenizer/byte_level.h"
#include "util/error.h"
#include "util/log.h"

namespace ft {
namespace {

using Kind = SynthFill;
using enum SynthFill;

constexpr int64_t kAlign = 256;              // tensor alignment inside the host buffer
constexpr int64_t kChunkBytes = 4 << 20;     // generation work item

/** The type a [rows, cols] matrix is stored in: `want`, or Q8_0 / F16 when cols is not a whole
 *  number of `want` blocks. */
DType matrix_type(DType want, int64_t cols) {
  if (cols % dtype_info(want).block_size == 0) return want;
  // FP8 / NVFP4 rows of 16k values take the 16-blocks, as the loader repacks them (quant/fp8.h, nvfp4.h).
  if ((want == DType::F8_E4M3_B32 || want == DType::NVFP4_G64) && cols % 16 == 0)
    return want == DType::F8_E4M3_B32 ? DType::F8_E4M3_B16 : DType::NVFP4_G16;
  return cols % 32 == 0 ? DType::Q8_0 : DType::F16;
}

/** True for the stored forms of FP8 / NVFP4 checkpoints, whose embedding and lm_head stay BF16. */
bool checkpoint_scaled(DType t) {
  return t == DType::F8_E4M3_B32 || t == DType::F8_E4M3_B16 || t == DType::NVFP4_G64 || t == DType::NVFP4_G16;
}

DType embedding_type(DType want, int64_t cols) {
  if (checkpoint_scaled(want)) return matrix_type(DType::BF16, cols);
  const bool quantizable = want == DType::F32 || want == DType::F16 || want == DType::BF16 || want == DType::Q8_0 ||
                           want == DType::Q4_0 || want == DType::Q4_K;
  return matrix_type(quantizable ? want : DType::Q8_0, cols);
}

std::vector<GgufKV> build_kvs(const ModelPreset& p, int64_t n_layer, DType wt) {
  std::vector<GgufKV> kv;
  auto add = [&](const std::string& k, GgufValue v) { kv.push_back(GgufKV{k, std::move(v)}); };
  auto u32 = [](int64_t v) { return GgufValue::u32(static_cast<uint32_t>(v)); };
  auto f32 = [](double v) { return GgufValue::f32(static_cast<float>(v)); };
  const std::string a = p.gguf_arch + ".";
  const bool llama = p.gguf_arch == "llama";
  add("general.architecture", GgufValue::string(p.gguf_arch));
  add("general.name", GgufValue::string(fmt::format("FreeToken synthetic {} ({}, random weights)", p.name,
                                                    dtype_name(wt))));
  add(a + "block_count", u32(n_layer));
  add(a + "context_length", u32(p.n_ctx));
  add(a + "embedding_length", u32(p.n_embd));
  // llama.cpp's llama architecture sizes its experts from feed_forward_length.
  add(a + "feed_forward_length", u32(llama ? p.n_ff_exp : p.n_ff));
  add(a + "attention.head_count", u32(p.n_head));
  if (p.is_mla()) {
    // llama.cpp's MLA convention: one latent "KV head" of kv_lora_rank + qk_rope keys and
    // kv_lora_rank values; the per-head widths in the *_mla keys.
    add(a + "attention.head_count_kv", u32(1));
    add(a + "attention.key_length", u32(p.kv_lora_rank + p.qk_rope_dim));
    add(a + "attention.value_length", u32(p.kv_lora_rank));
    add(a + "attention.key_length_mla", u32(p.qk_nope_dim + p.qk_rope_dim));
    add(a + "attention.value_length_mla", u32(p.v_head_dim));
    if (p.q_lora_rank > 0) add(a + "attention.q_lora_rank", u32(p.q_lora_rank));
    add(a + "attention.kv_lora_rank", u32(p.kv_lora_rank));
  } else {
    add(a + "attention.head_count_kv", u32(p.n_head_kv));
    add(a + "attention.key_length", u32(p.head_dim));
    add(a + "attention.value_length", u32(p.head_dim));
  }
  add(a + "attention.layer_norm_rms_epsilon", f32(p.rms_eps));
  add(a + "rope.freq_base", f32(p.rope_theta));
  add(a + "rope.dimension_count", u32(p.rot_dims()));
  if (p.yarn_factor > 0) {
    add(a + "rope.scaling.type", GgufValue::string("yarn"));
    add(a + "rope.scaling.factor", f32(p.yarn_factor));
    add(a + "rope.scaling.original_context_length", u32(p.yarn_orig_ctx));
    if (p.yarn_mscale_all_dim > 0) add(a + "rope.scaling.yarn_log_multiplier", f32(0.1 * p.yarn_mscale_all_dim));
  }
  add(a + "expert_count", u32(p.n_expert));
  add(a + "expert_used_count", u32(p.n_expert_used));
  if (!llama) add(a + "expert_feed_forward_length", u32(p.n_ff_exp));
  const int64_t dense = p.dense_layers(n_layer);
  if (dense > 0) add(a + "leading_dense_block_count", u32(dense));
  if (p.n_shared_exp > 0) add(a + "expert_shared_count", u32(p.n_shared_exp));
  if (p.sigmoid_router || p.is_mla()) add(a + "expert_gating_func", u32(p.sigmoid_router ? 2 : 1));
  if (p.norm_topk_prob) add(a + "expert_weights_norm", GgufValue::boolean(true));
  if (p.routed_scaling != 1.0) add(a + "expert_weights_scale", f32(p.routed_scaling));
  if (p.n_group > 1) {
    add(a + "expert_group_count", u32(p.n_group));
    add(a + "expert_group_used_count", u32(p.topk_group));
  }
  if (p.sliding_window > 0) add(a + "attention.sliding_window", u32(p.sliding_window));
  if (p.full_attn_interval > 0) {  // llama.cpp's qwen3next keys
    add(a + "expert_shared_feed_forward_length", u32(p.n_shared_exp * p.n_ff_exp));
    add(a + "ssm.conv_kernel", u32(p.lin_conv));
    add(a + "ssm.state_size", u32(p.lin_k_dim));
    add(a + "ssm.group_count", u32(p.lin_k_heads));
    add(a + "ssm.time_step_rank", u32(p.lin_v_heads));
    add(a + "ssm.inner_size", u32(p.lin_v_heads * p.lin_v_dim));
    add(a + "full_attention_interval", u32(p.full_attn_interval));
  }
  add(a + "vocab_size", u32(p.n_vocab));

  // Byte-level BPE vocabulary without merges: 256 byte tokens, filler tokens, 3 control tokens.
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  tokens.reserve(static_cast<size_t>(p.n_vocab));
  for (int b = 0; b < 256; ++b) {
    tokens.push_back(byte_level_encode(std::string(1, static_cast<char>(b))));
    types.push_back(1);  // normal
  }
  for (int64_t i = 256; i < p.n_vocab - 3; ++i) {
    tokens.push_back(fmt::format("tok{}", i));
    types.push_back(1);
  }
  for (const char* sp : {"<|endoftext|>", "<|im_start|>", "<|im_end|>"}) {
    tokens.emplace_back(sp);
    types.push_back(3);  // control
  }
  const int64_t v = p.n_vocab;
  add("tokenizer.ggml.model", GgufValue::string("gpt2"));
  add("tokenizer.ggml.pre", GgufValue::string(p.gguf_arch == "qwen3moe" ? "qwen2" : "default"));
  add("tokenizer.ggml.tokens", GgufValue::string_array(std::move(tokens)));
  add("tokenizer.ggml.token_type", GgufValue::numeric_array(GgufType::I32, types.data(), types.size()));
  add("tokenizer.ggml.merges", GgufValue::string_array({}));
  add("tokenizer.ggml.bos_token_id", u32(v - 3));
  add("tokenizer.ggml.eos_token_id", u32(v - 1));
  add("tokenizer.ggml.padding_token_id", u32(v - 3));
  add("tokenizer.ggml.add_bos_token", GgufValue::boolean(false));
  return kv;
}

/** The tensors of a synthetic model (data unset), how each is generated, and their offsets in one
 *  host buffer of `bytes` (each tensor at kAlign). Names and shapes are llama.cpp's, as the loader
 *  (model/decoder.cpp, model/mla.cpp, model/blocks.cpp) reads them. */
struct Plan {
  std::vector<TensorInfo> tensors;
  std::vector<Kind> kinds;
  std::vector<int64_t> offsets;
  int64_t bytes = 0;
  int64_t lazy_bytes = 0;  // tensors never written (kLazyZeros), offsets in a region of their own
};

Plan plan_tensors(const ModelPreset& p, int64_t n_layer, DType wt, DType et) {
  const int64_t H = p.n_embd, E = p.n_expert, F = p.n_ff_exp, D = p.head_dim, V = p.n_vocab, nh = p.n_head;
  Plan pl;
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Kind kind, DType dt) {
    TensorInfo t;
    t.name = name;
    t.dtype = dt;
    t.shape = std::move(shape);
    t.bytes = dtype_bytes(dt, t.numel());
    pl.offsets.push_back(pl.bytes);
    pl.bytes += (t.bytes + kAlign - 1) / kAlign * kAlign;
    pl.tensors.push_back(std::move(t));
    pl.kinds.push_back(kind);
  };
  auto matrix = [&](const std::string& name, std::vector<int64_t> shape, Kind kind = kMatrix) {
    const DType dt = matrix_type(wt, shape.back());
    add(name, std::move(shape), kind, dt);
  };
  auto vec = [&](const std::string& name, int64_t n, Kind kind = kOnes) { add(name, {n}, kind, DType::F32); };
  // MLA's k_b / v_b are dequantized per head at load (model/mla.cpp): a float type keeps them at
  // 2 bytes a value on the GPU, where a block type would become F32.
  const DType head_type = wt == DType::F32 || wt == DType::F16 || wt == DType::BF16 ? wt : DType::BF16;
  const int64_t dense = p.dense_layers(n_layer);
  // llama.cpp names HF's post_attention_layernorm attn_post_norm for glm4moe, ffn_norm elsewhere.
  // llama.cpp names HF's post_attention_layernorm post_attention_norm for gpt-oss too.
  const std::string ffn_norm = p.gguf_arch == "glm4moe" || p.oai_moe ? "post_attention_norm" : "ffn_norm";
  add("token_embd.weight", {V, H}, kEmbedding, embedding_type(wt, H));
  for (int64_t l = 0; l < n_layer; ++l) {
    const std::string b = fmt::format("blk.{}.", l);
    vec(b + "attn_norm.weight", H);
    if (p.is_linear(l)) {  // Gated DeltaNet (qwen3next)
      const int64_t C = p.lin_conv_dim(), Hv = p.lin_v_heads, Vd = Hv * p.lin_v_dim;
      matrix(b + "attn_qkv.weight", {C, H});
      matrix(b + "attn_gate.weight", {Vd, H});
      matrix(b + "ssm_ba.weight", {2 * Hv, H});
      add(b + "ssm_conv1d.weight", {C, p.lin_conv}, kMatrix, DType::F32);
      vec(b + "ssm_a", Hv, kMinusOnes);  // -exp(A_log) with A_log 0
      vec(b + "ssm_dt.bias", Hv, kZeros);
      vec(b + "ssm_norm.weight", p.lin_v_dim);
      matrix(b + "ssm_out.weight", {H, Vd}, kOutProj);
    } else if (p.is_mla()) {
      const int64_t qk = p.qk_nope_dim + p.qk_rope_dim, R = p.kv_lora_rank;
      if (p.q_lora_rank > 0) {
        matrix(b + "attn_q_a.weight", {p.q_lora_rank, H});                         // q_a_proj
        vec(b + "attn_q_a_norm.weight", p.q_lora_rank);                            // q_a_layernorm
        matrix(b + "attn_q_b.weight", {nh * qk, p.q_lora_rank});                   // q_b_proj
      } else {
        matrix(b + "attn_q.weight", {nh * qk, H});                                 // q_proj
      }
      matrix(b + "attn_kv_a_mqa.weight", {R + p.qk_rope_dim, H});                  // kv_a_proj_with_mqa
      vec(b + "attn_kv_a_norm.weight", R);                                         // kv_a_layernorm
      add(b + "attn_k_b.weight", {nh, R, p.qk_nope_dim}, kMatrix, head_type);      // kv_b_proj: W_UK^T per head
      add(b + "attn_v_b.weight", {nh, p.v_head_dim, R}, kMatrix, head_type);       // kv_b_proj: W_UV per head
      matrix(b + "attn_output.weight", {H, nh * p.v_head_dim}, kOutProj);
    } else {
      const int64_t qd = nh * D, kvd = p.n_head_kv * D;
      matrix(b + "attn_q.weight", {p.full_attn_interval > 0 ? 2 * qd : qd, H});  // qwen3next: + output gate
      matrix(b + "attn_k.weight", {kvd, H});
      matrix(b + "attn_v.weight", {kvd, H});
      if (p.attn_bias || p.oai_moe) {
        vec(b + "attn_q.bias", qd, kZeros);
        vec(b + "attn_k.bias", kvd, kZeros);
        vec(b + "attn_v.bias", kvd, kZeros);
      }
      matrix(b + "attn_output.weight", {H, qd}, kOutProj);
      if (p.oai_moe) {
        vec(b + "attn_output.bias", H, kZeros);
        vec(b + "attn_sinks.weight", nh, kZeros);
      }
      if (p.qk_norm != QkNorm::kNone) {
        const bool full = p.qk_norm == QkNorm::kFull;
        vec(b + "attn_q_norm.weight", full ? qd : D);
        vec(b + "attn_k_norm.weight", full ? kvd : D);
      }
    }
    vec(b + ffn_norm + ".weight", H);
    if (l < dense) {
      matrix(b + "ffn_gate.weight", {p.n_ff, H});
      matrix(b + "ffn_up.weight", {p.n_ff, H});
      matrix(b + "ffn_down.weight", {H, p.n_ff}, kOutProj);
      continue;
    }
    add(b + "ffn_gate_inp.weight", {E, H}, kRouter, DType::F32);
    // Zeros: selection unchanged. The deepseek2 loader needs the bias even where the model has
    // none (DeepSeek-V2's softmax routing).
    if (p.router_bias || p.is_mla()) vec(b + "exp_probs_b.bias", E, kZeros);
    auto expert = [&](const std::string& name, std::vector<int64_t> shape, Kind kind) {
      const DType dt = matrix_type(et, shape.back());
      add(name, std::move(shape), kind, dt);
    };
    expert(b + "ffn_gate_exps.weight", {E, F, H}, kMatrix);
    expert(b + "ffn_up_exps.weight", {E, F, H}, kMatrix);
    expert(b + "ffn_down_exps.weight", {E, H, F}, kOutProj);
    if (p.oai_moe) {
      vec(b + "ffn_gate_inp.bias", E, kZeros);
      add(b + "ffn_gate_exps.bias", {E, F}, kZeros, DType::F32);
      add(b + "ffn_up_exps.bias", {E, F}, kZeros, DType::F32);
      add(b + "ffn_down_exps.bias", {E, H}, kZeros, DType::F32);
    }
    if (p.n_shared_exp > 0) {
      const int64_t Fs = p.n_shared_exp * F;
      matrix(b + "ffn_gate_shexp.weight", {Fs, H});
      matrix(b + "ffn_up_shexp.weight", {Fs, H});
      matrix(b + "ffn_down_shexp.weight", {H, Fs}, kOutProj);
      if (p.full_attn_interval > 0) vec(b + "ffn_gate_inp_shexp.weight", H, kZeros);  // gate sigmoid(0) = 1/2
    }
  }
  vec("output_norm.weight", H);
  // FP8 / NVFP4 checkpoints leave lm_head unquantized (BF16).
  add("output.weight", {V, H}, kMatrix, matrix_type(checkpoint_scaled(wt) ? DType::BF16 : wt, H));
  return pl;
}

/** The tensors of a preset in the Hugging Face layout (tools/hf_synthetic.h), typed as plan_tensors types. */
Plan plan_hf_tensors(const ModelPreset& p, int64_t n_layer, DType wt, DType et) {
  Plan pl;
  for (SynthTensor& s : hf_synthetic_tensors(p, n_layer)) {
    TensorInfo t;
    t.name = std::move(s.name);
    t.shape = std::move(s.shape);
    const int64_t cols = t.shape.back();
    switch (s.store) {
      case SynthStore::kWeight: t.dtype = matrix_type(wt, cols); break;
      case SynthStore::kExpert: t.dtype = matrix_type(et, cols); break;
      case SynthStore::kEmbedding: t.dtype = embedding_type(wt, cols); break;
      case SynthStore::kFloat: t.dtype = wt == DType::F32 || wt == DType::F16 || wt == DType::BF16 ? wt : DType::BF16; break;
      case SynthStore::kF32: t.dtype = DType::F32; break;
      case SynthStore::kI32: t.dtype = DType::I32; break;
    }
    t.bytes = dtype_bytes(t.dtype, t.numel());
    int64_t& end = s.fill == kLazyZeros ? pl.lazy_bytes : pl.bytes;  // lazy tensors: a region of their own
    pl.offsets.push_back(end);
    end += (t.bytes + kAlign - 1) / kAlign * kAlign;
    pl.tensors.push_back(std::move(t));
    pl.kinds.push_back(s.fill);
  }
  return pl;
}

Plan plan_any(const ModelPreset& p, int64_t n_layer, DType wt, DType et) {
  return p.hf_config.empty() ? plan_tensors(p, n_layer, wt, et) : plan_hf_tensors(p, n_layer, wt, et);
}

/** Checkpoint::metadata() of a synthetic model: the GGUF key/values, or {"config": config.json, ...} as a
 *  Hugging Face folder gives it. */
nlohmann::json synthetic_metadata(const ModelPreset& p, int64_t n_layer, const std::vector<GgufKV>& kvs) {
  nlohmann::json m = nlohmann::json::object();
  if (!p.hf_config.empty()) {
    m["config"] = hf_synthetic_config(p, n_layer);
    m["generation_config"] = nullptr;
    m["tokenizer_config"] = nullptr;
    return m;
  }
  for (const GgufKV& kv : kvs) m[kv.key] = kv.value.to_json();
  return m;
}

/** Throws ft::Error(kUnsupported) naming the first tensor whose type the generator does not write
 *  as GGUF (the FP8 / NVFP4 checkpoints' stored forms: GGUF has no FP8 type, and its NVFP4 type keeps
 *  the tensor's scale in separate tensors, which the generator does not write). */
void require_gguf_types(const std::vector<TensorInfo>& tensors) {
  for (const TensorInfo& t : tensors)
    if (!dtype_is_gguf(t.dtype)) {
      const bool fp8 = t.dtype == DType::F8_E4M3_B32 || t.dtype == DType::F8_E4M3_B16;
      fail(ErrorCode::kUnsupported, "--write-gguf: {} is {} ({}); run the synthetic model directly, or give "
           "GGUF types (bf16, q8_0, q4_k, mxfp4, ...) to --weight-type / --expert-weight-type", t.name,
           user_type_name(t.dtype),
           fp8 ? "GGUF has no FP8 type"
               : "the generator does not write GGUF's NVFP4 type, whose tensor scales are separate tensors; GGUF "
                 "NVFP4 files from llama.cpp's converter load");
    }
}

/** The layer a tensor name belongs to ("blk.<l>." or "model.layers.<l>."); -1: none. */
int64_t layer_of(const std::string& name) {
  for (const char* pre : {"blk.", "model.layers."})
    if (name.starts_with(pre)) return std::stoll(name.substr(std::strlen(pre)));
  return -1;
}

/** The runnable preset of a valid spec. Throws what SyntheticCheckpoint's constructor documents. */
const ModelPreset& checked_preset(const SyntheticSpec& spec) {
  const ModelPreset& p = require_runnable_preset(spec.preset);
  if (spec.n_layer < 0) fail(ErrorCode::kInvalidArgument, "--dummy-layers {} must be >= 0", spec.n_layer);
  if (!(spec.router_skew >= 0) || !std::isfinite(spec.router_skew))
    fail(ErrorCode::kInvalidArgument, "--dummy-router-skew {} must be a finite number >= 0", spec.router_skew);
  if (!synthetic_type_supported(spec.weight_type))
    fail(ErrorCode::kUnsupported, "--weight-type {}: synthetic weights support {}", user_type_name(spec.weight_type),
         synthetic_type_names());
  if (spec.expert_type && !synthetic_type_supported(*spec.expert_type))
    fail(ErrorCode::kUnsupported, "--expert-weight-type {}: synthetic weights support {}",
         user_type_name(*spec.expert_type), synthetic_type_names());
  return p;
}

}  // namespace

DType synthetic_expert_type(const SyntheticSpec& spec) {
  if (spec.expert_type) return *spec.expert_type;
  const ModelPreset& p = find_preset(spec.preset);
  if (p.expert_type.empty()) return spec.weight_type;
  const std::optional<DType> t = dtype_from_name(p.expert_type);
  FT_CHECK(t.has_value());
  return *t;
}

DType parse_synthetic_weight_type(const std::string& name, const char* flag) {
  std::string lower = name;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  // The checkpoint formats' names for their stored forms (GGUF's own NVFP4 is not a synthetic type).
  if (lower == "fp8") return DType::F8_E4M3_B32;
  if (lower == "nvfp4") return DType::NVFP4_G64;
  const std::optional<DType> t = dtype_from_name(name);
  if (!t || !synthetic_type_supported(*t))
    fail(ErrorCode::kInvalidArgument, "{} {}: not a type synthetic weights can use ({})", flag, name,
         synthetic_type_names());
  return *t;
}

SyntheticLayout synthetic_layout(const SyntheticSpec& spec) {
  const ModelPreset& p = checked_preset(spec);
  SyntheticLayout out;
  out.n_layer = spec.n_layer > 0 ? spec.n_layer : p.n_layer;
  if (p.hf_config.empty()) out.kvs = build_kvs(p, out.n_layer, spec.weight_type);
  out.metadata = synthetic_metadata(p, out.n_layer, out.kvs);
  Plan pl = plan_any(p, out.n_layer, spec.weight_type, synthetic_expert_type(spec));
  out.tensors = std::move(pl.tensors);
  out.bytes = pl.bytes;
  return out;
}

void require_synthetic_gguf(const SyntheticSpec& spec) {
  const ModelPreset& p = checked_preset(spec);
  if (!p.hf_config.empty()) return;  // write_gguf refuses the layout itself
  require_gguf_types(plan_tensors(p, spec.n_layer > 0 ? spec.n_layer : p.n_layer, spec.weight_type,
                                  synthetic_expert_type(spec)).tensors);
}

SyntheticCheckpoint::SyntheticCheckpoint(const SyntheticSpec& spec) : spec_(spec) {
  preset_ = &checked_preset(spec);
  n_layer_ = spec.n_layer > 0 ? spec.n_layer : preset_->n_layer;
  const DType et = synthetic_expert_type(spec);
  path_ = fmt::format("synthetic:{}:{}{}:{}L:skew{}:seed{}", preset_->name, user_type_name(spec.weight_type),
                      et == spec.weight_type ? "" : fmt::format("+experts-{}", user_type_name(et)), n_layer_,
                      spec.router_skew, spec.seed);
  if (preset_->hf_config.empty()) kvs_ = build_kvs(*preset_, n_layer_, spec.weight_type);
  metadata_ = synthetic_metadata(*preset_, n_layer_, kvs_);
  plan();
  generate();
  index_tensors();
}

void SyntheticCheckpoint::plan() {
  const ModelPreset& p = *preset_;
  const int64_t E = p.n_expert;
  const DType wt = spec_.weight_type;
  Plan pl = plan_any(p, n_layer_, wt, synthetic_expert_type(spec_));
  tensors_ = std::move(pl.tensors);
  kinds_.clear();
  for (Kind k : pl.kinds) kinds_.push_back(static_cast<uint8_t>(k));
  offsets_ = std::move(pl.offsets);
  const int64_t offset = pl.bytes;

  const int64_t avail = host_memory_available();
  if (avail >= 0 && offset > avail)
    fail(ErrorCode::kOutOfMemory,
         "synthetic {} in {} with {} layers needs {:.1f} GiB of host memory, {:.1f} GiB is available; use fewer "
         "--dummy-layers or a smaller --weight-type",
         p.name, dtype_name(wt), n_layer_, static_cast<double>(offset) / (1 << 30),
         static_cast<double>(avail) / (1 << 30));
  storage_ = allocate_host_pages(std::max<int64_t>(offset, 1));
  if (pl.lazy_bytes > 0) {  // unreserved anonymous pages: zeros, memory only for the pages read
    const size_t len = static_cast<size_t>(pl.lazy_bytes);
    void* q = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (q == MAP_FAILED)
      fail(ErrorCode::kOutOfMemory, "synthetic {}: cannot map {:.1f} GiB of zero tables ({})", p.name,
           static_cast<double>(pl.lazy_bytes) / (1 << 30), std::strerror(errno));
    lazy_ = Buffer(q, pl.lazy_bytes, Device::kCpu, [len](void* m) { munmap(m, len); });
  }
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const bool lazy = static_cast<Kind>(kinds_[i]) == kLazyZeros;
    tensors_[i].data = static_cast<const uint8_t*>(lazy ? lazy_.data() : storage_.data()) + offsets_[i];
  }

  ranks_.resize(static_cast<size_t>(n_layer_));
  for (int64_t l = 0; l < n_layer_; ++l) {
    std::vector<int32_t>& r = ranks_[static_cast<size_t>(l)];
    r.resize(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; ++e) r[static_cast<size_t>(e)] = static_cast<int32_t>(e + 1);
    SynthRng rng(mix_seed(spec_.seed, 0x7a11'0000ull + static_cast<uint64_t>(l)));
    for (int64_t e = E - 1; e > 0; --e) std::swap(r[static_cast<size_t>(e)], r[rng.next() % static_cast<uint64_t>(e + 1)]);
  }
}

void SyntheticCheckpoint::generate() {
  const ModelPreset& p = *preset_;
  const int64_t H = p.n_embd;
  struct Task {
    size_t tensor;
    int64_t row0, row1;
  };
  std::vector<Task> tasks;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const TensorInfo& t = tensors_[i];
    const int64_t cols = t.shape.back(), rows = t.numel() / cols;
    const Kind kind = static_cast<Kind>(kinds_[i]);
    if (kind == kLazyZeros) continue;  // unwritten anonymous pages read as zeros
    const int64_t per = kind == kRouter || kind == kOnes || kind == kZeros || kind == kMinusOnes || kind == kHashRoutes
                            ? rows
                            : std::max<int64_t>(1, kChunkBytes / dtype_bytes(t.dtype, cols));
    for (int64_t r = 0; r < rows; r += per) tasks.push_back({i, r, std::min(rows, r + per)});
  }
  const float out_scale = 0.2f / std::sqrt(static_cast<float>(n_layer_));
  const float half_h = std::sqrt(static_cast<float>(H) / 2.0f);
  const float gumbel_sd = std::numbers::pi_v<float> / std::sqrt(6.0f);
  auto run = [&](const Task& task) {
    const TensorInfo& t = tensors_[task.tensor];
    const int64_t cols = t.shape.back(), row_bytes = dtype_bytes(t.dtype, cols);
    uint8_t* base = static_cast<uint8_t*>(storage_.data()) + offsets_[task.tensor] + task.row0 * row_bytes;
    const uint64_t seed = mix_seed(mix_seed(spec_.seed, task.tensor), static_cast<uint64_t>(task.row0));
    const int64_t n = (task.row1 - task.row0) * cols;
    switch (static_cast<Kind>(kinds_[task.tensor])) {
      case kOnes:
        for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(base)[i] = 1.0f;
        break;
      case kZeros:
        std::memset(base, 0, static_cast<size_t>(n) * sizeof(float));
        break;
      case kMinusOnes:
        for (int64_t i = 0; i < n; ++i) reinterpret_cast<float*>(base)[i] = -1.0f;
        break;
      case kMatrix:
        fill_random(t.dtype, base, n, 1.0f / std::sqrt(static_cast<float>(cols)), seed);
        break;
      case kOutProj:
        fill_random(t.dtype, base, n, out_scale / std::sqrt(static_cast<float>(cols)), seed);
        for (int64_t r = task.row0; r < task.row1; ++r)
          if (r % H == 0) std::memset(base + (r - task.row0) * row_bytes, 0, static_cast<size_t>(row_bytes));
        break;
      case kEmbedding: {
        SynthRng rng(seed);
        std::vector<float> row(static_cast<size_t>(cols));
        const float a = std::sqrt(3.0f);
        for (int64_t r = task.row0; r < task.row1; ++r) {
          row[0] = std::sqrt(static_cast<float>(cols - 1));
          for (int64_t j = 1; j < cols; ++j) row[static_cast<size_t>(j)] = (2.0f * rng.uniform() - 1.0f) * a;
          quantize_row(t.dtype, row.data(), base + (r - task.row0) * row_bytes, cols);
        }
        break;
      }
      case kRouter: {
        fill_random(DType::F32, base, n, gumbel_sd / half_h, seed);
        const int64_t layer = layer_of(t.name);  // "blk.<l>.ffn_gate_inp.weight", "model.layers.<l>.ffn.gate.weight"
        const std::vector<int32_t>& rank = ranks_[static_cast<size_t>(layer)];
        auto* w = reinterpret_cast<float*>(base);
        for (int64_t e = task.row0; e < task.row1; ++e)
          w[e * cols] = static_cast<float>(-spec_.router_skew * std::log(static_cast<double>(rank[static_cast<size_t>(e)]))) /
                        half_h;
        break;
      }
      case kLazyZeros:
        break;
      case kHashRoutes: {  // row r: k distinct experts, spread over [0, E) by a hash of r
        const int64_t E = p.n_expert, step = std::max<int64_t>(1, E / cols);
        auto* ids = reinterpret_cast<int32_t*>(base);
        for (int64_t r = task.row0; r < task.row1; ++r) {
          const uint64_t h = mix_seed(seed, static_cast<uint64_t>(r));
          for (int64_t j = 0; j < cols; ++j)
            ids[(r - task.row0) * cols + j] = static_cast<int32_t>((static_cast<int64_t>(h % static_cast<uint64_t>(E)) + j * step) % E);
        }
        break;
      }
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  const int n_threads = std::max(1, spec_.threads > 0 ? spec_.threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mu;
  auto worker = [&] {
    for (size_t i; (i = next.fetch_add(1)) < tasks.size();) {
      try {
        run(tasks[i]);
      } catch (...) {
        std::lock_guard<std::mutex> lock(error_mu);
        if (!error) error = std::current_exception();
        next = tasks.size();
      }
    }
  };
  std::vector<std::thread> pool;
  for (int i = 1; i < n_threads; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& th : pool) th.join();
  if (error) std::rethrow_exception(error);
  generate_seconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  spdlog::info("synthetic {}: {} tensors, {:.2f} GiB of {} weights generated in {:.1f} s ({} threads)", preset_->name,
               tensors_.size(), static_cast<double>(storage_.bytes()) / (1 << 30), user_type_name(spec_.weight_type),
               generate_seconds_, n_threads);
}

const std::vector<int32_t>& SyntheticCheckpoint::expert_ranks(int64_t layer) const {
  if (layer < 0 || layer >= n_layer_)
    fail(ErrorCode::kInvalidArgument, "expert_ranks: layer {} out of range (0..{})", layer, n_layer_ - 1);
  return ranks_[static_cast<size_t>(layer)];
}

void SyntheticCheckpoint::release(const void* data, int64_t bytes) {
  const auto* base = static_cast<const uint8_t*>(storage_.data());
  const auto* p = static_cast<const uint8_t*>(data);
  if (bytes < 0 || p < base || p + bytes > base + storage_.bytes())
    fail(ErrorCode::kInvalidArgument, "synthetic checkpoint: release of {} bytes at {} outside its {} bytes", bytes,
         data, storage_.bytes());
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + static_cast<uintptr_t>(bytes)) / page * page;
  if (end <= begin) return;
  if (madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED) != 0)
    fail(ErrorCode::kIo, "synthetic checkpoint: madvise(MADV_DONTNEED) of {} bytes failed: {}", end - begin,
         std::strerror(errno));
  released_bytes_ += static_cast<int64_t>(end - begin);
}

void SyntheticCheckpoint::write_gguf(const std::string& file) const {
  if (!preset_->hf_config.empty())
    fail(ErrorCode::kUnsupported, "--write-gguf: {} is a Hugging Face layout model ({} loads from safetensors only)",
         preset_->name, preset_->gguf_arch);
  if (released_bytes() > 0)
    fail(ErrorCode::kInvalidArgument, "synthetic checkpoint: {} bytes of tensor data were released to the expert "
         "banks; write the GGUF from a fresh one (ft bench --write-gguf)", released_bytes());
  require_gguf_types(tensors_);
  GgufWriter w;
  for (const GgufKV& kv : kvs_) w.add(kv.key, kv.value);
  for (const TensorInfo& t : tensors_) w.add_tensor_ref(t.name, t.dtype, t.shape, t.data, t.bytes);
  w.write(file);
}

}  // namespace ft
