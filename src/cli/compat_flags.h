#pragma once
// Flags of llama.cpp and of the Python FreeToken engine that mean something else here, or nothing
// yet, registered with the engine flags (cli/engine_flags.h) so `ft run`, `ft serve` and `ft bench`
// answer them: -ngl/--n-gpu-layers/--gpu-layers is taken and ignored with a warning (placement is
// planned); --tensor-parallel-size/--tp-size/-tp above 1 is refused (multi-GPU is issue 43); the
// Python engine's --memory-ratio, --num-pages and --gpu are refused naming the flag to use. (The
// names that mean the same are aliases on the flags themselves: -m, --model-path, -c, --ctx-size,
// --moe-cache-size, ...)
#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

namespace ft::cli {

struct CompatFlags {
  std::optional<std::string> gpu_layers;       // llama.cpp -ngl N (N, auto or all): ignored
  std::optional<int> tensor_parallel;          // 1 taken; more refused until issue 43
  std::optional<std::string> memory_ratio;     // Python engine: a fraction of free VRAM; here --gpu-memory-limit GiB
  std::optional<std::string> num_pages;        // Python engine: KV pages; here --kv-tokens tokens
  std::optional<std::string> gpu;              // Python engine: GPU index or UUID; here CUDA_VISIBLE_DEVICES
};

/** The multi-letter single-dash flags of llama.cpp and vLLM that CLI11 cannot name (-ngl, -tp, -np),
 *  rewritten to their long forms (--n-gpu-layers, --tensor-parallel-size, --parallel); every other
 *  argument unchanged. argv[0] included. */
std::vector<std::string> expand_multi_letter_flags(int argc, const char* const* argv);

/** Registers -ngl/--n-gpu-layers/--gpu-layers and --tensor-parallel-size/--tp-size/-tp (group
 *  Engine) and the hidden --memory-ratio, --num-pages and --gpu on `cmd`, writing into `f`. */
void add_compat_flags(CLI::App* cmd, CompatFlags& f);

/** Warns (one line) for -ngl, which placement planning makes moot. Throws ft::Error: kUnsupported for
 *  --tensor-parallel-size above 1 and for --gpu, kInvalidArgument for --tensor-parallel-size below 1,
 *  --memory-ratio and --num-pages, each message naming the flag to use instead. */
void check_compat_flags(const CompatFlags& f);

}  // namespace ft::cli
