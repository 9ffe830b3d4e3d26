#include "cli/compat_flags.h"

#include <algorithm>
#include <cctype>

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
    else if (i > 0 && a == "-cmoe") out.emplace_back("--cpu-moe");
    else if (i > 0 && a == "-ncmoe") out.emplace_back("--n-cpu-moe");
    else if (i > 0 && (a == "-hf" || a == "-hfr")) out.emplace_back("--hf-repo");
    else if (i > 0 && a == "-fa") out.emplace_back("--flash-attn");
    else if (i > 0 && a == "-ub") out.emplace_back("--ubatch-size");
    else if (i > 0 && a == "-ot") out.emplace_back("--override-tensor");
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
  const char* g = kGroupLlamaCpp;
  cmd->add_flag("--jinja", f.jinja, "Taken: chat templates are always rendered by ft's Jinja engine")->group(g);
  cmd->add_flag("--metrics", f.metrics, "Taken: ft serve always answers GET /metrics")->group(g);
  cmd->add_option("--flash-attn", f.flash_attn, "-fa [on|off|auto]: taken and ignored: attention kernels are always fused")
      ->expected(0, 1)
      ->type_name("")
      ->group(g);
  cmd->add_flag("--no-mmap", f.no_mmap, "Taken and ignored (warned): the file is mapped and read as the plan places it")
      ->group(g);
  cmd->add_flag("--mlock", f.mlock, "Taken and ignored (warned): host expert banks are pinned memory already")->group(g);
  cmd->add_option("-b,--batch-size", f.batch_size,
                  "Taken and ignored (warned): a step's tokens are set by the scheduler (ft serve: --max-prefill-tokens)")
      ->type_name("N")
      ->group(g);
  cmd->add_option("--ubatch-size", f.ubatch_size, "-ub: as -b")->type_name("N")->group(g);
  cmd->add_option("--hf-repo", f.hf_repo, "-hf: refused: ft does not download; give the path of a downloaded model")
      ->type_name("REPO")
      ->group(g);
  cmd->add_option("--override-tensor", f.override_tensor,
                  "-ot: refused: ft places tensors itself (--moe-strategy, --moe-cpu-layers, --gpu-memory-limit)")
      ->type_name("PATTERN")
      ->group(g);
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
  if (f.flash_attn) spdlog::debug("--flash-attn {} is ignored: attention kernels are always fused", *f.flash_attn);
  if (f.no_mmap)
    spdlog::warn("--no-mmap is ignored: ft maps the model file and copies what its plan places on the GPU or in host "
                 "banks");
  if (f.mlock) spdlog::warn("--mlock is ignored: the host expert banks are pinned memory already");
  if (f.batch_size || f.ubatch_size)
    spdlog::warn("-b/--batch-size and -ub/--ubatch-size are ignored: the scheduler sizes each step (ft serve: "
                 "--max-prefill-tokens prompt tokens a step, --max-running-requests sequences)");
  if (f.hf_repo)
    fail(ErrorCode::kInvalidArgument, "-hf/--hf-repo {}: ft does not download models; download the files (a GGUF, or "
         "a Hugging Face folder with config.json, *.safetensors and tokenizer.json) and give their path", *f.hf_repo);
  if (f.override_tensor)
    fail(ErrorCode::kInvalidArgument, "-ot/--override-tensor {}: ft places tensors itself; the expert placement is "
         "--moe-strategy (cpu: all experts on the CPU, as -ot exps=CPU), --moe-cpu-layers N (as -ncmoe N) and "
         "--gpu-memory-limit GIB", *f.override_tensor);
  if (f.gpu)
    fail(ErrorCode::kUnsupported, "--gpu {}: ft uses the first GPU CUDA shows it; pick the card with "
         "CUDA_VISIBLE_DEVICES={} ft ... (multi-GPU is not built yet)", *f.gpu, *f.gpu);
}

namespace {

/** Whether `arg` gives the option named `name` ("-c", "--ctx-size"): "-c", "-c0", "--ctx-size",
 *  "--ctx-size=0". */
bool gives(const std::string& arg, const std::string& name) {
  if (arg.rfind(name, 0) != 0) return false;
  if (arg.size() == name.size()) return true;
  return name.size() == 2 ? true : arg[name.size()] == '=';
}

}  // namespace

std::string name_flags_as_typed(std::string message, const CLI::App& cmd, const std::vector<std::string>& args) {
  for (const CLI::Option* opt : cmd.get_options()) {
    const std::string primary = opt->get_name();  // "--kv-tokens" for "-c,--kv-tokens,--ctx-size"
    if (primary.rfind("--", 0) != 0) continue;
    const size_t at = message.find(primary);
    if (at == std::string::npos) continue;
    const char after = at + primary.size() < message.size() ? message[at + primary.size()] : ' ';
    if (std::isalnum(static_cast<unsigned char>(after)) || after == '-') continue;  // --kv-tokens in --kv-tokens-x
    std::vector<std::string> names;
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    std::string typed;
    for (size_t i = 1; i < args.size() && typed.empty(); ++i)
      for (const std::string& n : names)
        if (n != primary && gives(args[i], n) && !gives(args[i], primary)) {
          typed = n;
          break;
        }
    if (!typed.empty()) message.replace(at, primary.size(), typed + " (" + primary + ")");
  }
  return message;
}

std::string unexpected_arguments_message(const std::string& message) {
  std::string rest;
  for (const std::string lead : {"The following arguments were not expected: ", "The following argument was not expected: "})
    if (message.rfind(lead, 0) == 0) rest = message.substr(lead.size());
  if (rest.empty()) return message;
  std::vector<std::string> words;
  for (size_t p = 0; p < rest.size();) {
    const size_t q = rest.find(' ', p);
    words.push_back(rest.substr(p, q == std::string::npos ? std::string::npos : q - p));
    if (q == std::string::npos) break;
    p = q + 1;
  }
  std::reverse(words.begin(), words.end());
  std::string first_option, others;
  for (const std::string& w : words) {
    if (first_option.empty() && w.size() > 1 && w[0] == '-') first_option = w;
    else others += (others.empty() ? "'" : ", '") + w + "'";
  }
  if (first_option.empty()) return "unexpected argument" + std::string(words.size() > 1 ? "s " : " ") + others;
  return "unknown option '" + first_option + "'" + (others.empty() ? "" : " (also not expected: " + others + ")");
}

}  // namespace ft::cli
