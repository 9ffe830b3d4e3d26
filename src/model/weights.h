#pragma once
// WeightLoader: fetches named tensors from a Checkpoint, validates name, shape and dtype against
// what the architecture expects, and makes them resident on the backend. Every weight has a GGUF
// (llama.cpp) and a Hugging Face name; the loader picks by checkpoint format.
#include <cstdint>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "backend/ops.h"
#include "dist/tensor_parallel.h"
#include "formats/checkpoint.h"
#include "formats/quant_config.h"

namespace ft {

class ProgressSink;

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
  /** Reads a Hugging Face checkpoint's quantization_config (formats/quant_config.h) from its
   *  config.json (or, when it has none, from a ModelOpt export's hf_quant_config.json). Throws what
   *  parse_quant_config throws (an unsupported method or option, named).
   *  `progress`, when set, gets each checkpoint tensor's stored bytes once, when the loader has made
   *  it resident or copied it (or handed out its view: host()); routed expert matrices left in the
   *  mapped file (host_experts, host_routed) are not counted (the expert banks count them). */
  WeightLoader(const Checkpoint& ckpt, Ops& ops, ProgressSink* progress = nullptr);

  /** About the bytes `progress` will be given while the model loads: every tensor but the routed
   *  expert matrices that stay views (GGUF "*_exps.weight" but NVFP4 ones with a ".scale"; HF tensors
   *  under ".experts." that are not biases, FP8 matrices or their scales, or gpt-oss's fused experts:
   *  those are converted while loading). An estimate: tensors the model never reads are in it. */
  int64_t load_bytes_estimate() const;

  /** The checkpoint's quantization_config (method kNone for GGUF and plain checkpoints). */
  const QuantConfig& quant_config() const { return quant_; }

  bool is_gguf() const { return gguf_; }
  const Checkpoint& checkpoint() const { return ckpt_; }
  const std::string& name(const WeightName& n) const { return gguf_ ? n.gguf : n.hf; }
  /** Whether the checkpoint holds the tensor (for compressed-tensors NVFP4, "<module>.weight" is there
   *  when its "<module>.weight_packed" is). */
  bool has(const WeightName& n) const;

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
  /** The tensor's dtype and shape, validated as get() validates them (the device's kernels included),
   *  with no data: a table the memory plan places later (Model::place_deferred: get() or
   *  get_host_mapped()), so that it never passes through the device when the plan keeps it in host
   *  memory. Counted for load progress. Throws what get() throws. */
  Tensor unplaced(const WeightName& n, std::initializer_list<int64_t> shape);
  /** get_stacked(), but the stack is in host memory the backend reads over the bus (for a table a
   *  step reads a few rows of, stored in parts, e.g. Qwen4-Exp's n-gram shards). Parts that follow
   *  each other in memory (the mapped file) are placed as one view, as get_host_mapped places a
   *  tensor (CPU: no copy); others as one copy in Ops::host_allocator() memory, filled from the parts
   *  and then pinned (CUDA: page-locked and mapped, returned as a Device::kCuda view at its UVA
   *  address; CPU: the host copy), so the table is in host memory once, not twice. A backend whose
   *  allocator gives no device address gets make_host_mapped of the copy. The memory is owned by
   *  take_storage(). An empty Tensor when the dtypes differ; throws what get() throws for a missing
   *  or misshapen part, kOutOfMemory naming the size when the memory cannot be had. */
  Tensor get_stacked_host_mapped(const std::vector<WeightName>& names, const std::vector<int64_t>& rows, int64_t cols);
  /** Rows `rows` of the validated 2-D tensor (shape `shape`), in that order, as one resident matrix
   *  [rows.size(), cols] of its dtype: for checkpoints whose projections interleave what the model
   *  keeps apart (Qwen3-Next's per-head query and output gate, its grouped q/k/v/z). A host copy on the
   *  CPU (kept by take_host_storage), a device copy on CUDA. Throws what host() throws, kInternal for a
   *  row out of range. */
  Tensor get_rows(const WeightName& n, std::initializer_list<int64_t> shape, const std::vector<int64_t>& rows);
  /** Columns [col_begin, col_begin + n_cols) of every row of the validated 2-D tensor (shape `shape`)
   *  as one resident matrix [rows, n_cols] of its dtype: the input-column slice of a row-parallel
   *  linear layer (tensor parallelism, dist/tensor_parallel.h). A host copy on the CPU (kept by
   *  take_host_storage), a device copy on CUDA. Throws what host() throws, kInternal for a range
   *  outside the row, kUnsupported when a quantized type's range does not fall on its blocks
   *  ("tensor <name>: columns [a, b) do not fall on Q4_K blocks of 256"). */
  Tensor get_cols(const WeightName& n, std::initializer_list<int64_t> shape, int64_t col_begin, int64_t n_cols);

  /** The tensor-parallel shard the model being loaded is for (default: one rank, no split). An
   *  architecture that loads by it (build_decoder) records it in Model::tensor_parallel(); load_model
   *  refuses the others when size > 1. */
  void set_tensor_parallel(const dist::TpShard& tp) { tp_ = tp; }
  /** Bytes of the tensors get_rows / get_cols cut that this rank did not take (the other ranks' rows or
   *  columns; in the form read, which is the stored one but for formats converted at load), 0 for one
   *  rank: what the memory plan takes off the checkpoint's bytes (Model::unloaded_weight_bytes). */
  int64_t tp_unloaded_bytes() const { return tp_unloaded_bytes_; }
  const dist::TpShard& tensor_parallel() const { return tp_; }

  /** Like get(), but an absent tensor gives an empty Tensor. */
  Tensor get_optional(const WeightName& n, std::initializer_list<int64_t> shape,
                      WeightKind kind = WeightKind::kMatrix);
  /** Validated host view (stays in the mapped file; not made resident).
   *  FP8 checkpoints (quant_config() kFp8): an F8_E4M3 matrix `<module>.weight` [N, K] is read with its
   *  F32/BF16/F16 scale tensor `<module>.<scale_suffix>` (block: [ceil(N/br), ceil(K/bc)], tensor: one
   *  value, channel: [N] or [N, 1]) and repacked losslessly into F8_E4M3_B32 rows (F8_E4M3_B16 when K is
   *  not a multiple of 32; quant/fp8.h), a host copy of 1.125 (1.25) bytes a weight owned by
   *  take_host_storage() (made once per tensor). Throws kNotFound for a missing scale tensor,
   *  kInvalidFile for a misshapen scale or an F8_E4M3 tensor of a module the config leaves unquantized
   *  (modules_to_not_convert / ignore), kUnsupported for an FP8 tensor that is not a matrix or whose
   *  rows are not a multiple of 16 values.
   *  NVFP4 checkpoints (quant_config() kNvfp4, ModelOpt): a U8 `<module>.weight` [N, K/2] of packed E2M1
   *  codes (or [E, N, K/2] of stacked experts) is read with its F8_E4M3 `<module>.weight_scale` [N, K/16]
   *  and F32 `<module>.weight_scale_2` ([] or [1]; [E] per expert for a stack) and repacked losslessly
   *  into NVFP4_G64 rows (NVFP4_G16 when K is not a multiple of 64; quant/nvfp4.h), a host copy of 5 (6.5)
   *  bits a weight owned by take_host_storage(); `input_scale` is ignored (weight-only use).
   *  compressed-tensors NVFP4 is read the same way from `<module>.weight_packed`, `weight_scale` and
   *  `weight_global_scale` (which divides; `input_global_scale` ignored) when `<module>.weight` is asked
   *  for. Throws
   *  kNotFound for a missing scale tensor, kInvalidFile for a misshapen tensor, a NaN block scale or a U8
   *  weight of a module the config leaves unquantized (exclude_modules / ignore), kUnsupported for rows
   *  that are not a multiple of 16 values.
   *  GGUF NVFP4 weights with a per-tensor scale (llama.cpp's converter for ModelOpt checkpoints): an
   *  NVFP4 `<module>.weight` with an F32 `<module>.scale` of shape [1] (or [E] for stacked experts
   *  [E, N, K], one per expert) is repacked into NVFP4_G64 rows whose blocks carry that scale
   *  (nvfp4_rows_from_gguf), a host copy of 5 bits a weight; `<module>.input_scale` is ignored
   *  (weight-only use). Without `.scale` (llama.cpp leaves out a scale of 1) the NVFP4 view is used.
   *  Throws kInvalidFile naming `<module>.scale` when it is not F32 of that shape or holds a negative
   *  or non-finite value, kUnsupported for a `.scale` beside a weight of another type (llama.cpp would
   *  multiply it in; FreeToken reads it for NVFP4 only). */
  Tensor host(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind = WeightKind::kMatrix);
  /** host() of a routed expert matrix the model leaves in the mapped file for the expert banks:
   *  not counted as loaded (an FP8 repack is). */
  Tensor host_routed(const WeightName& n, std::initializer_list<int64_t> shape);

  /** F32 copy of a validated tensor (any dtype quant/ dequantizes), in host memory owned by
   *  take_host_storage() (never a view of the checkpoint, so it outlives a released mapping). For
   *  biases and sinks whose readers want F32. Throws what host() throws. */
  Tensor host_f32(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind = WeightKind::kVector);
  /** host_f32 made resident (Ops::make_resident: on CPU the host copy itself). */
  Tensor get_f32(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind = WeightKind::kVector);

  /** gpt-oss's fused HF experts of MoE layer `layer` (transformers GptOssExperts, module `module`
   *  after "model.layers.N.", e.g. "mlp.experts"), input-major:
   *    gate_up_proj [E, H, 2F] (gate = [..., 0::2], up = [..., 1::2]), gate_up_proj_bias [E, 2F],
   *    down_proj [E, F, H], down_proj_bias [E, H]   (F32, F16 or BF16)
   *  returned as the bank every reader takes: gate, up [F, H] and down [H, F] per expert in the
   *  checkpoint's dtype (transposed and de-interleaved, exact), gate_bias / up_bias F32 [E, F],
   *  down_bias F32 [E, H] (glu fields left at their defaults: the caller sets them).
   *  Memory: the converted matrices are host copies owned by take_host_storage(), as many bytes as
   *  the layer's experts have in the checkpoint (the mapped file's pages are read once and can be
   *  dropped by the OS); BF16 gpt-oss-20b: ~38 GB, gpt-oss-120b: ~229 GB.
   *  MXFP4 checkpoints (as OpenAI releases them; OCP layout, quant/mxfp4.h): gate_up_proj_blocks U8
   *  [E, 2F, H/32, 16] + gate_up_proj_scales U8 [E, 2F, H/32] (output-major, rows interleaving gate
   *  and up), down_proj_blocks [E, H, F/32, 16] + down_proj_scales [E, H, F/32] in place of the two
   *  matrices: each row repacked losslessly into GGUF MXFP4 (mxfp4_rows_from_ocp; the bytes
   *  llama.cpp's converter writes), even rows gate and odd rows up, no transpose; host copies of the
   *  same size as the checkpoint's (~10 GB for gpt-oss-20b, ~61 GB for gpt-oss-120b). H and F must
   *  be multiples of 32. Throws kNotFound / kInvalidFile as host() does for a missing or misshapen
   *  tensor (U8 ones named with their expected shape), kUnsupported for another dtype, what
   *  mxfp4_rows_from_ocp throws (a NaN scale) with the module as context. */
  ExpertBank host_fused_experts(int64_t layer, const std::string& module, int64_t n_expert, int64_t n_ff,
                                int64_t n_embd);

  /** One MoE layer's routed experts as host views: GGUF stacked [E, F, H] tensors (`gguf` base name,
   *  e.g. "ffn_gate_exps") or HF per-expert tensors (`hf` with "{}" for the expert index, e.g.
   *  "mlp.experts.{}.gate_proj"). */
  std::vector<Tensor> host_experts(int64_t layer, const std::string& gguf, const std::string& hf, int64_t n_expert,
                                   int64_t rows, int64_t cols);

  /** Device memory owned for resident weights (empty on CPU); the model keeps it. */
  std::vector<Buffer> take_storage() { return std::move(storage_); }
  /** Host copies made by host_f32 / get_f32 / host_fused_experts (the model keeps them). */
  std::vector<Buffer> take_host_storage() { return std::move(host_storage_); }

 private:
  /** On the CUDA backend, refuses a quantized tensor whose dtype no CUDA kernel reads, naming it
   *  (ft::Error kUnsupported) before it is placed, instead of failing every request later. */
  void check_device_kernel(const std::string& name, const Tensor& h) const;
  /** host()'s FP8 path (see there). */
  Tensor fp8_view(const TensorInfo& info, const std::string& name, std::initializer_list<int64_t> shape,
                  WeightKind kind);
  /** host()'s path for a GGUF weight with a `<module>.scale` tensor `scale` (see there). */
  Tensor gguf_scaled_view(const TensorInfo& info, const TensorInfo& scale, const std::string& name,
                          std::initializer_list<int64_t> shape, WeightKind kind);
  /** host()'s NVFP4 path (see there). */
  Tensor nvfp4_view(const TensorInfo& info, const std::string& name, std::initializer_list<int64_t> shape,
                    WeightKind kind);
  Tensor view(const TensorInfo& info, const std::string& name, std::initializer_list<int64_t> shape,
              WeightKind kind) const;
  /** host_fused_experts' matrices: F32/F16/BF16 gate_up_proj + down_proj, or MXFP4 *_blocks + *_scales
   *  (`p`: "model.layers.N.<module>."). */
  ExpertBank fused_plain_matrices(const std::string& p, int64_t n_expert, int64_t n_ff, int64_t n_embd);
  ExpertBank fused_mxfp4_matrices(const std::string& p, int64_t n_expert, int64_t n_ff, int64_t n_embd);
  /** host() without counting the tensor as loaded (the placing callers count it once placed). */
  Tensor read(const WeightName& n, std::initializer_list<int64_t> shape, WeightKind kind);
  /** `view` (a host copy in `hb` of part of tensor `n`, for get_rows / get_cols) made resident; `hb` kept
   *  when the backend reads it in place (CPU). Counts `n` as loaded. */
  Tensor place_copy(const WeightName& n, Buffer hb, const Tensor& view);
  /** The host views of `names` ([rows[i], cols] each, checked as get() checks them) and their row sum
   *  in `total`; empty when their dtypes differ. For get_stacked / get_stacked_host_mapped. */
  std::vector<Tensor> read_parts(const std::vector<WeightName>& names, const std::vector<int64_t>& rows, int64_t cols,
                                 int64_t& total);
  /** Gives progress_ the stored bytes of tensor `name` the first time it is counted. */
  void count(const std::string& name);
  /** The data of U8 tensor `name` of exactly `shape`; kNotFound / kInvalidFile naming it otherwise. */
  const uint8_t* u8_tensor(const std::string& name, const std::vector<int64_t>& shape) const;

  const Checkpoint& ckpt_;
  Ops& ops_;
  bool gguf_;
  QuantConfig quant_;
  std::unordered_map<std::string, Tensor> fp8_rows_;  // tensor name -> its repacked FP8 / NVFP4 host copy
  std::vector<Buffer> storage_;
  std::vector<Buffer> host_storage_;
  ProgressSink* progress_ = nullptr;
  std::unordered_set<std::string> counted_;  // tensors progress_ was given
  dist::TpShard tp_;
  int64_t tp_unloaded_bytes_ = 0;
};

}  // namespace ft
