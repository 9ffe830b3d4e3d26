// `ft run MODEL|--model PATH [--prompt TEXT | --prompt-ids 1,2,3] [--max-tokens N] [sampling flags]
//  [--threads N] [--device D] [--logits-out FILE] [--page-size N] [--max-prefill-tokens N] [MoE flags, cli/moe_flags.h]`:
// one generation. Streams the generated text to stdout when the checkpoint has a tokenizer (GGUF metadata or
// tokenizer.json), else (or with --print-ids) the generated ids, comma-separated (as --prompt-ids takes them); then prefill and
// decode speed on stderr. Once loaded it logs the memory plan (cli/memory_banner.h, as ft serve's banner: the
// KV cache's tokens, bytes and dtype among it) on stderr. --logits-out writes float32 logits of every prompt
// position, row-major [prompt_tokens, vocab]. Prompt + --max-tokens beyond the model's context length
// is refused before loading (exit 2), as `ft serve` refuses such a request.
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/engine_flags.h"
#include "cli/help_format.h"
#include "cli/int_list.h"
#include "cli/memory_banner.h"
#include "cli/model_arg.h"
#include "engine/engine.h"
#include "engine/serving_engine.h"
#include "engine/generate.h"
#include "model/registry.h"
#include "tokenizer/detokenizer.h"
#include "tokenizer/vocab.h"
#include "util/log.h"
#include "util/error.h"
#include "util/progress.h"

namespace ft::cli {
namespace {

struct RunArgs {
  ModelArg model_arg;  // MODEL, -m, --model, --model-path
  std::string model;   // the path resolved from model_arg
  std::string prompt;
  std::string prompt_ids;
  int32_t max_tokens = 128;
  float temperature = 0.8f;
  int top_k = 0;
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repeat_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int64_t seed = -1;
  bool ignore_eos = false;
  bool print_ids = false;
  std::string logits_out;
  int64_t max_prefill_tokens = 8192;
  EngineOptions engine;  // --threads, --device, --page-size, MoE flags, ...
  CompatFlags compat;    // llama.cpp / Python-engine flags (cli/compat_flags.h)
  const CLI::App* cmd = nullptr;  // the parsed subcommand (finish_engine_options counts flags on it)
};

/** The server's context check (server/generation.h) for one run: prompt + --max-tokens must fit the
 *  model's context length (4096 when the checkpoint does not say, as `ft serve` assumes). Throws
 *  ft::Error(kContextLength) naming the numbers. */
void check_context_length(int64_t n_ctx_train, int64_t n_prompt, int64_t max_tokens) {
  const int64_t limit = n_ctx_train > 0 ? n_ctx_train : 4096;
  if (n_prompt + max_tokens <= limit) return;
  fail(ErrorCode::kContextLength,
       "this model's maximum context length is {} tokens, but {} were requested ({} in the prompt, {} from "
       "--max-tokens): shorten the prompt or lower --max-tokens",
       limit, n_prompt + max_tokens, n_prompt, max_tokens);
}

int run(RunArgs& a) {
  if (a.prompt.empty() == a.prompt_ids.empty())
    fail(ErrorCode::kInvalidArgument, "give exactly one of --prompt TEXT (not empty) or --prompt-ids 1,2,3");
  if (a.max_tokens < 0) fail(ErrorCode::kInvalidArgument, "--max-tokens {} must be >= 0", a.max_tokens);
  if (a.max_prefill_tokens < 1)
    fail(ErrorCode::kInvalidArgument, "--max-prefill-tokens {} must be >= 1", a.max_prefill_tokens);
  // Open the logits file first, so a bad path fails before any loading or generation.
  std::ofstream logits_file;
  if (!a.logits_out.empty()) {
    logits_file.open(a.logits_out, std::ios::binary);
    if (!logits_file) fail(ErrorCode::kInvalidArgument, "--logits-out: cannot open {} for writing", a.logits_out);
  }
  EngineOptions& eo = a.engine;
  refuse_kv_tiers(eo, "ft run");  // first: the reason it holds for any other flag
  finish_engine_options(*a.cmd, eo, a.compat);
  ProgressReporter progress;  // the load's phases on stderr
  eo.progress = &progress;
  // The tokenizer and the context length come from the checkpoint itself, opened once: the prompt is
  // encoded and checked before the (slow) load, which then takes the same checkpoint.
  std::unique_ptr<Vocab> vocab;
  std::unique_ptr<Checkpoint> ckpt = open_checkpoint(a.model);
  const int64_t n_ctx = read_model_config(*ckpt).n_ctx_train;
  try {
    vocab = std::make_unique<Vocab>(Vocab::from_checkpoint(*ckpt));
  } catch (const Error& e) {
    if (!a.prompt.empty()) throw e.with_context("--prompt needs the checkpoint's tokenizer");
    spdlog::info("no usable tokenizer ({}); printing token ids", e.what());
  }
  const std::vector<int32_t> prompt = a.prompt.empty() ? parse_int_list(a.prompt_ids, "--prompt-ids", "a token id", 0, INT32_MAX) : vocab->encode(a.prompt);
  if (prompt.empty()) fail(ErrorCode::kInvalidArgument, "--prompt: the text encodes to no tokens");
  const int64_t n_prompt = static_cast<int64_t>(prompt.size());
  check_context_length(n_ctx, n_prompt, a.max_tokens);

  eo.kv_tokens = n_prompt + a.max_tokens + 1;
  eo.kv_tokens_flag = "-n/--max-tokens";  // with the prompt
  eo.max_step_tokens = std::min(a.max_prefill_tokens, n_prompt);
  eo.max_logit_rows = a.logits_out.empty() ? 1 : eo.max_step_tokens;
  eo.max_seqs = 1;
  std::unique_ptr<ServingEngine> served = ServingEngine::load(std::move(ckpt), a.model, eo);
  Engine* engine = &served->engine();  // rank 0's
  // The plan `ft serve` prints in its banner (the KV cache's tokens, bytes and dtype among it), on stderr.
  std::string banner = memory_banner(*engine, eo.threads);
  banner.pop_back();  // its last '\n': the log line ends there
  spdlog::info("memory plan\n{}", banner);

  GenerateRequest req;
  req.prompt = prompt;
  req.max_tokens = a.max_tokens;
  req.sampling.temperature = a.temperature;
  req.sampling.top_k = a.top_k;
  req.sampling.top_p = a.top_p;
  req.sampling.min_p = a.min_p;
  req.sampling.repetition_penalty = a.repeat_penalty;
  req.sampling.presence_penalty = a.presence_penalty;
  req.sampling.frequency_penalty = a.frequency_penalty;
  if (a.seed >= 0) req.sampling.seed = static_cast<uint64_t>(a.seed);
  req.sampling.validate();
  req.stop_at_eos = !a.ignore_eos;
  req.prompt_logits = !a.logits_out.empty();
  const bool text = vocab && !a.print_ids;
  std::unique_ptr<Detokenizer> detok = text ? std::make_unique<Detokenizer>(*vocab, /*skip_special=*/true, !prompt_has_text(*vocab, prompt)) : nullptr;
  bool first = true;
  req.on_token = [&](int32_t id) {
    const std::string piece = text ? detok->feed(id) : (first ? "" : ",") + std::to_string(id);
    first = false;
    std::fwrite(piece.data(), 1, piece.size(), stdout);
    std::fflush(stdout);
  };
  GenerateOptions go;
  go.max_prefill_tokens = a.max_prefill_tokens;
  GenerateStats stats;
  const GenerateResult res = generate(*engine, served->runner(), {req}, go, &stats)[0];

  if (!a.logits_out.empty()) {
    std::ofstream& out = logits_file;
    out.write(reinterpret_cast<const char*>(res.prompt_logits.data()),
              static_cast<std::streamsize>(res.prompt_logits.size() * sizeof(float)));
    if (!out) fail(ErrorCode::kIo, "--logits-out: cannot write {}", a.logits_out);
  }
  if (detok) {
    const std::string rest = detok->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  std::fflush(stdout);
  auto rate = [](int64_t n, double s) { return s > 0 ? static_cast<double>(n) / s : 0.0; };
  std::fprintf(stderr, "prefill: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(stats.prefill_tokens),
               stats.prefill_seconds, rate(stats.prefill_tokens, stats.prefill_seconds));
  std::fprintf(stderr, "decode: %lld tokens in %.3f s (%.1f tokens/s)\n", static_cast<long long>(stats.decode_tokens),
               stats.decode_seconds, rate(stats.decode_tokens, stats.decode_seconds));
  return 0;
}

}  // namespace

void add_run_command(CLI::App& app, Action& action) {
  auto args = std::make_shared<RunArgs>();
  CLI::App* cmd = app.add_subcommand("run", "Generate from a prompt (prints the text, then speed)");
  add_model_arg(cmd, args->model_arg, "GGUF file or Hugging Face folder");
  const char* gen = kGroupGeneration;
  cmd->add_option("-p,--prompt", args->prompt, "Prompt text, encoded with the checkpoint's tokenizer (BOS added as it asks)")
      ->group(gen);
  cmd->add_option("--prompt-ids", args->prompt_ids, "Prompt as comma-separated token ids, e.g. 1,403,407")->group(gen);
  cmd->add_option("-n,--max-tokens,--n-predict", args->max_tokens, "Tokens to generate (llama.cpp's -n)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(gen);
  cmd->add_flag("--ignore-eos", args->ignore_eos, "Keep generating after an end-of-sequence token")->group(gen);
  cmd->add_flag("--print-ids", args->print_ids, "Print generated token ids instead of text")->group(gen);
  cmd->add_option("--logits-out", args->logits_out, "Write float32 logits of every prompt position here")->group(gen);
  const char* sampling = kGroupSampling;
  cmd->add_option("--temperature,--temp", args->temperature, "Sampling temperature; 0 = greedy")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--top-k", args->top_k, "Keep the k most likely tokens (0 = off)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(sampling);
  cmd->add_option("--top-p", args->top_p, "Nucleus sampling mass (1 = off)")->capture_default_str()->group(sampling);
  cmd->add_option("--min-p", args->min_p, "Drop tokens below min_p x the best probability")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--repeat-penalty", args->repeat_penalty, "CTRL repetition penalty (1 = off)")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--presence-penalty", args->presence_penalty, "OpenAI presence penalty")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--frequency-penalty", args->frequency_penalty, "OpenAI frequency penalty")
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--seed", args->seed, "Sampling seed (-1 = random)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str()
      ->group(sampling);
  cmd->add_option("--max-prefill-tokens", args->max_prefill_tokens, "Prompt tokens per forward (chunked prefill)")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(kGroupMemory);
  add_engine_flags(cmd, args->engine, args->compat);  // Engine, Memory, MoE expert offload, Logging
  cmd->callback([args, cmd, &action] {
    args->cmd = cmd;
    args->model = resolve_model(args->model_arg);
    if (args->model.empty()) throw CLI::RequiredError("the model (ft run MODEL ..., or -m/--model MODEL)");
    action = [args] { return run(*args); };
  });
}

}  // namespace ft::cli
