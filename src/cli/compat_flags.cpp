#include "cli/compat_flags.h"

#include <algorithm>
#include <cctype>

#include "cli/help_format.h"
#include "util/error.h"
#include "util/log.h"

namespace ft::cli {

namespace {

/** llama.cpp's (and vLLM's) multi-letter single-dash flags and the long forms they mean here. */
const std::pair<const char*, const char*> kMultiLetter[] = {
    {"-ngl", "--n-gpu-layers"}, {"-tp", "--tensor-parallel-size"}, {"-np", "--parallel"},
    {"-cmoe", "--cpu-moe"},      {"-ncmoe", "--n-cpu-moe"},          {"-hf", "--hf-repo"},
    {"-hfr", "--hf-repo"},       {"-hff", "--hf-file"},              {"-fa", "--flash-attn"},
    {"-ub", "--ubatch-size"},    {"-ot", "--override-tensor"},       {"-ctk", "--cache-type-k"},
    {"-ctv", "--cache-type-v"},  {"-cb", "--cont-batching"},         {"-tb", "--threads-batch"},
    {"-ts", "--tensor-split"},   {"-sm", "--split-mode"},            {"-mg", "--main-gpu"},
    {"-nkvo", "--no-kv-offload"}, {"-dev", "--device-list"},  {"-v", "--log-level=debug"},
    {"--verbose", "--log-level=debug"}, {"--log-disable", "--log-level=off"},
};

bool is_flash_attn_value(const std::string& v) { return v == "on" || v == "off" || v == "auto"; }

}  // namespace

std::vector<std::string> expand_multi_letter_flags(int argc, const char* const* argv) {
  std::vector<std::string> out;
  out.reserve(static_cast<size_t>(argc));
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    std::string to = a;
    for (const auto& [from, long_form] : kMultiLetter) {
      const std::string_view f = from;
      if (i > 0 && a == f) to = long_form;
      // -tp=2: the value attached, as the long forms take it (CLI11 would read -t p=2).
      if (i > 0 && a.size() > f.size() && a.compare(0, f.size(), f) == 0 && a[f.size()] == '=')
        to = std::string(long_form) + a.substr(f.size());
    }
    // -fa alone (older llama.cpp) turns flash attention on; newer ones take on|off|auto. A bare -fa
    // must not take the next word (a model path) as its value.
    if (i > 0 && to == "--flash-attn" && !(i + 1 < argc && is_flash_attn_value(argv[i + 1]))) to = "--flash-attn=on";
    // Any other single-dash word of several letters is a llama.cpp flag ft does not know: CLI11 would
    // read "-ctx" as "-c tx". Kept whole, it is reported as the unknown option it is.
    if (i > 0 && to == a && a.size() > 2 && a[0] == '-' && a[1] != '-' && std::isalpha(static_cast<unsigned char>(a[1])) &&
        std::all_of(a.begin() + 1, a.end(), [](char c) { return std::isalpha(static_cast<unsigned char>(c)) != 0; }))
      to = "--unknown-short-flag=" + a;
    out.push_back(std::move(to));
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
  // The Python engine's flags that mean something else here: refused, naming the flag to use.
  cmd->add_option("--memory-ratio", f.memory_ratio)->group("");
  cmd->add_option("--num-pages", f.num_pages)->group("");
  cmd->add_option("--gpu", f.gpu)->group("");
  const char* g = kGroupLlamaCpp;
  cmd->add_flag("--jinja", f.jinja, "Taken: chat templates are always rendered by ft's Jinja engine")->group(g);
  cmd->add_flag("--metrics", f.metrics, "Taken: ft serve always answers GET /metrics")->group(g);
  cmd->add_option("--flash-attn", f.flash_attn, "-fa [on|off|auto]: taken and ignored: attention kernels are always fused")
      ->check(CLI::IsMember({"on", "off", "auto"}))
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
  cmd->add_option("--hf-file", f.hf_file, "-hff: refused, as -hf")->type_name("FILE")->group("");
  cmd->add_option("--cache-type-k", f.cache_type_k,
                  "-ctk: the KV cache type, as --kv-cache-dtype: f32, bf16, fp8, q8_0, or f16, which means bf16 (ft has "
                  "no f16 KV cache; bf16 takes as many bytes); one type for K and V")
      ->type_name("TYPE")
      ->group(g);
  cmd->add_option("--cache-type-v", f.cache_type_v, "-ctv: as -ctk (the same type)")->type_name("TYPE")->group(g);
  cmd->add_flag("--cont-batching", f.cont_batching, "-cb: taken: requests are always batched continuously")->group(g);
  cmd->add_flag("--no-warmup", f.no_warmup, "Taken: there is no warm-up run to skip")->group(g);
  cmd->add_option("--threads-batch", f.threads_batch, "-tb: taken and ignored (warned): --threads serves prefill too")
      ->type_name("N")
      ->group(g);
  cmd->add_option("--tensor-split,--split-mode,--main-gpu,--device-list", f.multi_gpu,
                  "-ts, -sm, -mg, -dev: refused: ft runs on one GPU (CUDA_VISIBLE_DEVICES picks it)")
      ->type_name("VALUE")
      ->group("");
  cmd->add_flag("--no-kv-offload", f.no_kv_offload, "-nkvo: refused: the KV cache stays on the device")->group("");
  // Multi-node launch flags (SGLang's --nnodes / --node-rank, torchrun's --master-addr): one node only.
  cmd->add_option("--nnodes", f.nnodes, "nodes of a multi-node run: only 1 (multi-node is not built yet)")
      ->type_name("N")
      ->group(kGroupEngine);
  cmd->add_option("--node-rank", f.node_rank, "this node's rank in a multi-node run: only 0")->type_name("R")->group(kGroupEngine);
  cmd->add_option("--master-addr,--dist-init-addr", f.master_addr,
                  "rank 0's address for a multi-node run: refused (multi-node is not built yet)")
      ->type_name("HOST[:PORT]")
      ->group(kGroupEngine);
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
  if (f.threads_batch)
    spdlog::warn("-tb/--threads-batch {} is ignored: --threads sets the CPU threads of prefill and decode alike",
                 *f.threads_batch);
  if (f.hf_file)
    fail(ErrorCode::kInvalidArgument, "-hff/--hf-file {}: ft does not download models; download the file and give its "
         "path", *f.hf_file);
  if (f.multi_gpu)
    fail(ErrorCode::kUnsupported, "-ts/-sm/-mg/-dev {}: llama.cpp's layer split is not how ft splits a model: "
         "--tensor-parallel-size N splits heads and FFN columns over N ranks (--expert-parallel on: the experts); "
         "CUDA_VISIBLE_DEVICES picks the cards", *f.multi_gpu);
  if ((f.nnodes && *f.nnodes != 1) || (f.node_rank && *f.node_rank != 0) || f.master_addr)
    fail(ErrorCode::kUnsupported, "{}: multi-node runs are not supported yet: ft's ranks are on one host "
         "(--tensor-parallel-size N)", f.master_addr ? "--master-addr " + *f.master_addr
         : f.nnodes && *f.nnodes != 1 ? fmt::format("--nnodes {}", *f.nnodes) : fmt::format("--node-rank {}", *f.node_rank));
  if (f.no_kv_offload)
    fail(ErrorCode::kUnsupported, "-nkvo/--no-kv-offload: the KV cache stays in device memory (a host KV tier is not "
         "built yet); --kv-cache-dtype and --kv-tokens make it smaller");
  if (f.override_tensor)
    fail(ErrorCode::kInvalidArgument, "-ot/--override-tensor {}: ft places tensors itself; the expert placement is "
         "--moe-strategy (cpu: all experts on the CPU, as -ot exps=CPU), --moe-cpu-layers N (as -ncmoe N) and "
         "--gpu-memory-limit GIB", *f.override_tensor);
  if (f.gpu)
    fail(ErrorCode::kUnsupported, "--gpu {}: ft uses the first GPU CUDA shows it; pick the card with "
         "CUDA_VISIBLE_DEVICES={} ft ... (multi-GPU is not built yet)", *f.gpu, *f.gpu);
}

std::optional<std::string> kv_dtype_from_cache_types(const CompatFlags& f) {
  if (!f.cache_type_k && !f.cache_type_v) return std::nullopt;
  if (f.cache_type_k && f.cache_type_v && *f.cache_type_k != *f.cache_type_v)
    fail(ErrorCode::kInvalidArgument, "-ctk {} and -ctv {}: ft's KV cache holds K and V in one type (--kv-cache-dtype); "
         "give the same", *f.cache_type_k, *f.cache_type_v);
  const std::string& t = f.cache_type_k ? *f.cache_type_k : *f.cache_type_v;
  if (t == "f16" || t == "bf16") return std::string("bf16");
  if (t == "f32" || t == "fp8" || t == "q8_0") return t;
  fail(ErrorCode::kInvalidArgument, "-ctk/-ctv {}: ft's KV cache holds f32, bf16 (which f16 means here: ft has no f16 "
       "KV cache), fp8 or q8_0; -ctk/-ctv take those names, as --kv-cache-dtype does", t);
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

std::string name_flags_as_typed(std::string message, const CLI::App& cmd, const std::vector<std::string>& args,
                                const std::vector<std::string>& typed) {
  for (const CLI::Option* opt : cmd.get_options()) {
    // The first long name: "--kv-tokens" for "-c,--kv-tokens,--ctx-size" (get_name() is "" for a hidden one).
    if (opt->get_lnames().empty()) continue;
    const std::string primary = "--" + opt->get_lnames().front();
    const size_t at = message.find(primary);
    if (at == std::string::npos) continue;
    if (at > 0 && message[at - 1] == '/') continue;  // "-hf/--hf-repo": the message names both already
    const char after = at + primary.size() < message.size() ? message[at + primary.size()] : ' ';
    if (std::isalnum(static_cast<unsigned char>(after)) || after == '-') continue;  // --kv-tokens in --kv-tokens-x
    std::vector<std::string> names;
    for (const std::string& n : opt->get_snames()) names.push_back("-" + n);
    for (const std::string& n : opt->get_lnames()) names.push_back("--" + n);
    std::string as_typed;
    for (size_t i = 1; i < args.size() && as_typed.empty(); ++i)
      for (const std::string& n : names) {
        if (!gives(args[i], n)) continue;
        // What the user wrote: the word before expand_multi_letter_flags (-tp), else the name it gives.
        if (i < typed.size() && typed[i] != args[i]) as_typed = typed[i].substr(0, typed[i].find('='));
        else if (n != primary && !gives(args[i], primary)) as_typed = n;
        else as_typed = primary;
        break;
      }
    if (!as_typed.empty() && as_typed != primary) message.replace(at, primary.size(), as_typed + " (" + primary + ")");
  }
  return message;
}

namespace {

/** Edit distance between a and b (insertions, deletions, substitutions), for "did you mean". */
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string closest_flag(const std::string& word, const CLI::App& cmd) {
  const std::string flag = word.substr(0, word.find('='));
  if (flag.size() < 4 || flag.rfind("--", 0) != 0) return "";
  std::string best;
  size_t best_d = std::max<size_t>(2, flag.size() / 4) + 1;  // at most ~a quarter of the word wrong
  for (const CLI::Option* opt : cmd.get_options()) {
    if (opt->get_group().empty()) continue;  // hidden: refusals, not suggestions
    for (const std::string& n : opt->get_lnames()) {
      const size_t d = edit_distance(flag, "--" + n);
      if (d < best_d) best_d = d, best = "--" + n;
    }
  }
  return best;
}

std::string unexpected_arguments_message(const std::string& message, const CLI::App* cmd) {
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
  for (std::string& w : words)  // a several-letter single-dash word kept whole (expand_multi_letter_flags)
    if (w.rfind("--unknown-short-flag=", 0) == 0) w = w.substr(std::string("--unknown-short-flag=").size());
  std::string first_option, others;
  for (const std::string& w : words) {
    if (first_option.empty() && w.size() > 1 && w[0] == '-') first_option = w;
    else others += (others.empty() ? "'" : ", '") + w + "'";
  }
  if (first_option.empty()) return "unexpected argument" + std::string(words.size() > 1 ? "s " : " ") + others;
  const std::string near = cmd ? closest_flag(first_option, *cmd) : "";
  return "unknown option '" + first_option + "'" + (near.empty() ? "" : " (did you mean " + near + "?)") +
         (others.empty() ? "" : " (also not expected: " + others + ")");
}

}  // namespace ft::cli
