#include "cli/compat_flags.h"

#include "cli/help_format.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::cli {

std::vector<std::string> expand_multi_letter_flags(int argc, const char* const* argv) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(argc));
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i > 0 && a == "-ngl") out.emplace_back("--n-gpu-layers");
    else if (i > 0 && a == "-tp") out.emplace_back("--tensor-parallel-size");
    else if (i > 0 && a == "-np") out.emplace_back("--parallel");
    else out.push_back(a);
  }
  return out;
}

namespace {

/** -ngl's values in llama.cpp: a layer count (-1: all), auto or all. */
CLI::Validator gpu_layers_value() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v == "auto" || v == "all") return {};
        size_t used = 0;
        try {
          const long long n = std::stoll(v, &used);
          if (used == v.size() && n >= -1) return {};
        } catch (const std::exception&) {
        }
        return "expected a layer count, auto or all (got '" + v + "')";
      },
      "");  // no type decoration in --help
}

}  // namespace

void add_compat_flags(CLI::App* cmd, CompatFlags& f) {
  cmd->add_option("--n-gpu-layers,--gpu-layers", f.gpu_layers,
                  "-ngl (llama.cpp): taken and ignored, with a warning: FreeToken plans where each weight lives "
                  "(dense layers on the GPU, experts by the MoE plan within --gpu-memory-limit); --device cpu "
                  "keeps off the GPU")
      ->type_name("N")
      ->check(gpu_layers_value())
      ->group(kGroupEngine);
  cmd->add_option("--tensor-parallel-size,--tp-size", f.tensor_parallel,
                  "-tp: GPUs to split the model over; only 1 for now (multi-GPU is not built yet)")
      ->group(kGroupEngine);
  // The Python engine's flags that mean something else here: refused, naming the flag to use.
  cmd->add_option("--memory-ratio", f.memory_ratio)->group("");
  cmd->add_option("--num-pages", f.num_pages)->group("");
  cmd->add_option("--gpu", f.gpu)->group("");
}

void check_compat_flags(const CompatFlags& f) {
  if (f.gpu_layers)
    spdlog::warn("-ngl/--n-gpu-layers {} is ignored: FreeToken places the weights itself (dense layers on the GPU, "
                 "experts by the MoE plan within --gpu-memory-limit; --device cpu keeps off the GPU)",
                 *f.gpu_layers);
  if (f.tensor_parallel) {
    if (*f.tensor_parallel < 1)
      fail(ErrorCode::kInvalidArgument, "--tensor-parallel-size {} must be >= 1", *f.tensor_parallel);
    if (*f.tensor_parallel > 1)
      fail(ErrorCode::kUnsupported, "--tensor-parallel-size {}: not supported yet: ft runs on one GPU (multi-GPU, "
           "tensor and expert parallel over NCCL, is not built yet); leave the flag out", *f.tensor_parallel);
  }
  if (f.memory_ratio)
    fail(ErrorCode::kInvalidArgument, "--memory-ratio {} (the Python engine's fraction of free GPU memory) is not "
         "taken here: give --gpu-memory-limit GIB, the GiB of device memory to plan within (default: all the free "
         "memory)", *f.memory_ratio);
  if (f.num_pages)
    fail(ErrorCode::kInvalidArgument, "--num-pages {} (the Python engine's KV pages) is not taken here: give the KV "
         "cache in tokens, --kv-tokens N (ft serve; -c/--ctx-size, --num-tokens), with pages of --page-size tokens",
         *f.num_pages);
  if (f.gpu)
    fail(ErrorCode::kUnsupported, "--gpu {}: ft uses the first GPU CUDA shows it; pick the card with "
         "CUDA_VISIBLE_DEVICES={} ft ... (multi-GPU is not built yet)", *f.gpu, *f.gpu);
}

}  // namespace ft::cli
