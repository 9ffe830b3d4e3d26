#pragma once
// WeightLoader: fetches named tensors from a Checkpoint, validates name, shape and dtype against
// what the architecture expects, and makes them resident on the backend. Every weight has a GGUF
// (llama.cpp) and a Hugging Face name; the loader picks by checkpoint format.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "formats/checkpoint.h"

namespace ft {

/** A weight's two spellings. */
struct WeightName {
  std::string gguf;  // "blk.0.attn_q.weight"
  std::string hf;    // "model.layers.0.self_attn.q_proj.weight"
};

/** Per-layer names: layer_weight(3, "attn_q", "self_attn.q_proj") ->
 *  {"blk.3.attn_q.weight", "model.layers.3.self_attn.q_proj.weight"}; suffix "bias" for biases. */
WeightName layer_weight(int64_t layer, const std::string& gguf, const std::string& hf,
                        const std::string& suffix = "weight");

/** What a tensor may be stored as: matrices accept F32/F16/BF16 and every GGUF block type quant/ can
 *  dequantize; vectors (norms, biases) only F32/F16/BF16. */
enum class WeightKind : uint8_t { kMatrix, kVector };

class WeightLoader {
 public:
  WeightLoader(const Checkpoint& ckpt, Ops& ops);

  bool is_gguf() const { return gguf_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  const std::string& name(const WeightName& n) const { return gguf_ ? n.gguf : n.hf; }
  bool has(const WeightName& n) const { return ckpt_.find(name(n)) != nullptr; }

  /** The tensor, validated and resident. A 1-D tensor of K elements is accepted for an expected
   *  [1, K]. Throws ft::Error(kNotFound) "missing tensor <name> (expected shape [..]) in <path>",
   *  kInvalidFile "tensor <name>: expected shape [..], found [..]" or "... dtype I32 is not ...". */
  Tensor get(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind = WeightKind::kMatrix);
  /** Matrices of one dtype and row length stacked row-wise into one resident tensor [sum rows, cols]
   *  (e.g. q, k, v for a fused QKV projection); an empty Tensor when their dtypes differ. Throws
   *  what get() throws for a missing or misshapen tensor. */
  Tensor get_stacked(const std::vector<WeightName>& names, const std::vector<int64_t>& rows, int64_t cols);
  /** Like get(), but placed in host memory the backend reads over the bus (Ops::make_host_mapped;
   *  on the CPU backend the view itself). */
  Tensor get_host_mapped(const WeightName& n, std::initializer_list<int64_t> shape);
  /** Like get(), but an absent tensor gives an empty Tensor. */
  Tensor get_optional(const WeightName& n, std::initializer_list<int64_t> shape,
                      WeightKind kind = WeightKind::kMatrix);
  /** Validated host view (stays in the mapped file; not made resident). */
  Tensor host(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind = WeightKind::kMatrix);

  /** One MoE layer's routed experts as host views: GGUF stacked [E, F, H] tensors (`gguf` base name,
   *  e.g. "ffn_gate_exps") or HF per-expert tensors (`hf` with "{}" for the expert index, e.g.
   *  "mlp.experts.{}.gate_proj"). */
  std::vector<Tensor> host_experts(int64_t layer, const std::string& gguf, const std::string& hf, int64_t n_expert,
                                   int64_t rows, int64_t cols);

  /** Device memory owned for resident weights (empty on CPU); the model keeps it. */
  std::vector<Buffer> take_storage() { return std::move(storage_); }

 private:
  Tensor view(const TensorInfo& info, const std::string& name, std::initializer_list<int64_t> shape,
              WeightKind kind) const;

  const Checkpoint& ckpt_;
  Ops& ops_;
  bool gguf_;
  std::vector<Buffer> storage_;
};

}  // namespace ft
