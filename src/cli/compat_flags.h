#pragma once
// Flags of llama.cpp and of the Python FreeToken engine that mean something else here, or nothing
// yet, registered with the engine flags (cli/engine_flags.h) so `ft run`, `ft serve` and `ft bench`
// answer them: -ngl/--n-gpu-layers/--gpu-layers is taken and ignored with a warning (placement is
// planned); the
// Python engine's --memory-ratio, --num-pages and --gpu are refused naming the flag to use. (The
// names that mean the same are aliases on the flags themselves: -m, --model-path, -c, --ctx-size,
// --moe-cache-size, ...) These are not options of the engine, so they stay out of EngineOptions: a
// small struct the commands translate (-ctk, -cmoe) or refuse (cli/engine_flags.h finish_engine_options).
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ft::cli {

struct CompatFlags {
  std::optional<std::string> gpu_layers;       // llama.cpp -ngl N (N, auto or all): ignored
  std::optional<std::string> memory_ratio;     // Python engine: a fraction of free VRAM; here --gpu-memory-limit GiB
  std::optional<std::string> num_pages;        // Python engine: KV pages; here --kv-tokens tokens
  std::optional<std::string> gpu;              // Python engine: GPU index or UUID; here CUDA_VISIBLE_DEVICES
  // llama.cpp's flags with nothing to do here (taken, a warning where a user might expect an effect)
  // or that ft cannot honour (refused, naming what to do instead).
  bool jinja = false;                          // --jinja: templates are always rendered by ft's Jinja
  bool metrics = false;                        // --metrics: /metrics is always served
  std::optional<std::string> flash_attn;       // -fa [on|off|auto]: attention kernels are always fused
  bool no_mmap = false, mlock = false;         // --no-mmap, --mlock: warned, ignored
  std::optional<std::string> batch_size;       // -b: warned, ignored (steps are sized by the scheduler)
  std::optional<std::string> ubatch_size;      // -ub: warned, ignored
  std::optional<std::string> hf_repo;          // -hf: refused (no downloads)
  std::optional<std::string> override_tensor;  // -ot: refused (placement is planned)
  std::optional<std::string> hf_file;          // -hff: refused (no downloads)
  std::optional<std::string> cache_type_k, cache_type_v;  // -ctk / -ctv: --kv-cache-dtype (one for both)
  bool cont_batching = false, no_warmup = false;           // taken: always so / nothing to skip
  std::optional<std::string> threads_batch;    // -tb: warned, ignored (--threads serves both)
  std::optional<std::string> multi_gpu;        // -ts, -sm, -mg, -dev: refused (llama.cpp's layer split)
  std::optional<int> nnodes, node_rank;        // multi-node: 1 and 0 taken, others refused
  std::optional<std::string> master_addr;      // multi-node rendezvous: refused
  bool no_kv_offload = false;                  // -nkvo: refused (the KV cache stays on the device)
  bool cpu_moe = false;                        // -cmoe/--cpu-moe: --moe-strategy cpu (registered with the MoE flags)
};

/** --kv-cache-dtype as llama.cpp's -ctk/-ctv give it (f16 and bf16: bf16; f32; fp8; q8_0), or nullopt when
 *  neither is given. Throws ft::Error(kInvalidArgument) when they differ (one type holds K and V here)
 *  or name a type ft's KV cache has not (q4_0, iq4_nl, ...), naming --kv-cache-dtype's values. */
std::optional<std::string> kv_dtype_from_cache_types(const CompatFlags& f);

/** The multi-letter single-dash flags of llama.cpp and vLLM that CLI11 cannot name (-ngl, -tp, -np,
 *  -cmoe, -ncmoe, -hf, -fa, -ub, -ot, -ctk, -ctv, -cb, -tb, -ts, ...), rewritten one word for one to
 *  their long forms (--n-gpu-layers, ...); -v/--verbose and --log-disable to --log-level=debug / off; a
 *  bare -fa (no on|off|auto after it) to --flash-attn=on, so it takes no model path as its value; any
 *  other single-dash word of several letters to --unknown-short-flag=WORD, reported as unknown rather
 *  than read as bundled one-letter flags (-ctx as -c tx). A value attached with '=' stays attached
 *  (-tp=2 -> --tensor-parallel-size=2). argv[0] included. */
std::vector<std::string> expand_multi_letter_flags(int argc, const char* const* argv);

/** Registers -ngl/--n-gpu-layers/--gpu-layers (group Engine), the hidden --memory-ratio, --num-pages and --gpu, and llama.cpp's --jinja, --metrics,
 *  -fa/--flash-attn, --no-mmap, --mlock, -b/--batch-size, -ub/--ubatch-size, -hf/--hf-repo and
 *  -ot/--override-tensor (group "llama.cpp flags") on `cmd`, writing into `f`. */
void add_compat_flags(CLI::App* cmd, CompatFlags& f);

/** Warns (one line) for -ngl, which placement planning makes moot. Throws ft::Error: kUnsupported for
 *  --gpu, kInvalidArgument for --memory-ratio and --num-pages, each message naming the flag to use
 *  instead. */
void check_compat_flags(const CompatFlags& f);

/** `message` (a usage or validation error about `cmd`'s options) with each option named as the user
 *  typed it in `args` where that was another of its names: "--kv-tokens: must be >= 1" after `-c 0`
 *  reads "-c (--kv-tokens): must be >= 1". `args` are the words parsed (after
 *  expand_multi_letter_flags), `typed` the words as typed (the same count), so -tp reads as typed. */
std::string name_flags_as_typed(std::string message, const CLI::App& cmd, const std::vector<std::string>& args,
                                const std::vector<std::string>& typed);

/** CLI11's "The following arguments were not expected: b a" (its words in reverse order) or "The
 *  following argument was not expected: a" as "unknown option 'a' (also not expected: 'b')", in the
 *  order typed, with the nearest long flag of `cmd` when one is near ("(did you mean --x?)"); other
 *  messages unchanged. */
std::string unexpected_arguments_message(const std::string& message, const CLI::App* cmd = nullptr);

/** The long flag of `cmd` (hidden ones left out) nearest to `word` ("--max-token" -> "--max-tokens"),
 *  or "" when none is within about a quarter of the word's letters (edit distance). */
std::string closest_flag(const std::string& word, const CLI::App& cmd);

}  // namespace ft::cli
