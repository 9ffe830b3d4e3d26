// `ft serve`: the OpenAI-compatible HTTP server. Loads a checkpoint (or builds the demo model), its
// tokenizer and chat template, starts the engine service and the HTTP server, prints one start-up
// summary, and on SIGINT/SIGTERM stops accepting, lets running requests finish for a few seconds,
// cancels the rest and exits 0.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <vector>

#include "cli/commands.h"
#include "cli/flag_checks.h"
#include "cli/engine_flags.h"
#include "cli/help_format.h"
#include "cli/memory_banner.h"
#include "cli/model_arg.h"
#include "tools/demo_model.h"
#include "engine/engine.h"
#include "engine/serving_engine.h"
#include "engine/engine_runner.h"
#include "engine/kv_tiers.h"
#include "engine/scheduler.h"
#include "engine/service.h"
#include "formats/checkpoint.h"
#include "server/auth.h"
#include "server/chat_reply.h"
#include "server/http_server.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/model_template.h"
#include "tokenizer/vocab.h"
#include "util/error.h"
#include "util/log.h"
#include "util/format.h"
#include "util/progress.h"
#include "util/read_file.h"

namespace ft::cli {
namespace {

/** Prompt tokens a step where the memory plan streams routed experts at prefill and
 *  --max-prefill-tokens is not given (vLLM's and SGLang's default step budget). */
constexpr int64_t kStreamedPrefillTokens = 8192;

namespace fs = std::filesystem;

/** What `ft serve` parses: the options of the server, the scheduler and the engine (its flags bound
 *  straight onto their fields), and the command's own: the model and how replies are read. */
struct ServeArgs {
  ModelArg model_arg;  // MODEL, -m, --model, --model-path
  std::string model;   // the path resolved from model_arg ("": the demo model)
  std::string served_model_name;
  std::string api_key_file;      // --api-key-file: the key read from a file (llama-server's flag)
  int64_t max_seq_len = 0;       // 0: the model's context length
  bool state_snapshots_given = false;
  std::string chat_template;
  int shutdown_grace_s = 5;
  // llama-server's server-wide sampling defaults (--temp, --top-k, ...; flag -> value): refused, as
  // ft serve has none but --seed (requests set their own).
  std::map<std::string, std::string> llama_sampling;
  server::ServerOptions server;  // --host, --port, --api-key, --seed, --reasoning, ...
  SchedulerConfig scheduler;     // --max-running-requests, --max-waiting-requests, --max-prefill-tokens
  EngineOptions engine;          // --threads, --device, --kv-tokens, MoE flags, ...
  CompatFlags compat;            // llama.cpp / Python-engine flags (cli/compat_flags.h)
  const CLI::App* cmd = nullptr;  // the parsed subcommand (finish_engine_options counts flags on it)
};

std::string human_count(double n) {
  if (n >= 1e9) return fmt::format("{:.2f} B", n / 1e9);
  if (n >= 1e6) return fmt::format("{:.2f} M", n / 1e6);
  return fmt::format("{:.1f} K", n / 1e3);
}

/** The API key in `path` (--api-key-file): its one non-empty line, blanks around it trimmed. Throws
 *  ft::Error (kInvalidArgument) when --api-key is given too (`given`), or the file holds no key or
 *  several (llama-server takes a key a line; ft serve checks one); kNotFound when it cannot be read. */
std::string api_key_from_file(const std::string& path, const std::string& given) {
  if (!given.empty()) fail(ErrorCode::kInvalidArgument, "--api-key and --api-key-file {}: give one of them", path);
  std::istringstream in(read_text_file(path));
  std::vector<std::string> keys;
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find_first_not_of(" \t\r"), b = line.find_last_not_of(" \t\r");
    if (a != std::string::npos) keys.push_back(line.substr(a, b - a + 1));
  }
  if (keys.size() != 1)
    fail(ErrorCode::kInvalidArgument, "--api-key-file {}: expected one key (one non-empty line), found {}{}", path,
         keys.size(), keys.size() > 1 ? " (ft serve checks a single key)" : "");
  return keys[0];
}

/** The checkpoint's tokenizer; a folder without one is refused saying what works (ft has no
 *  tokenizer flag: the file goes beside the weights, or `ft run --prompt-ids` runs without one). */
Vocab serve_vocab(const Checkpoint& ckpt) {
  try {
    return Vocab::from_checkpoint(ckpt);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kNotFound || ckpt.format() == "gguf") throw;
    throw Error(e.code(),
                fmt::format("{}. ft serve needs the model's tokenizer: put its tokenizer.json (and tokenizer_config.json, "
                            "which holds the chat template) in {} (for example `hf download ORG/MODEL tokenizer.json "
                            "tokenizer_config.json --local-dir {}`); without a tokenizer, `ft run {} --prompt-ids 1,2,3` "
                            "generates from token ids",
                            e.what(), ckpt.path(), ckpt.path(), ckpt.path()));
  }
}

int run_serve(ServeArgs& f) {
  f.server.validate();
  for (const auto& [names, value] : f.llama_sampling)
    if (!value.empty())
      fail(ErrorCode::kInvalidArgument,
           "{} {}: ft serve has no server-wide sampling defaults (only --seed): each request sets its own "
           "(temperature, top_k, top_p, min_p, repeat_penalty; max_tokens or n_predict), and a request that sets "
           "none samples as OpenAI's API does (temperature 1, no top-k/top-p/min-p, to the end of the context)",
           names.substr(names.rfind(',') + 1), value);
  const int max_running = f.scheduler.max_running;
  EngineOptions& eo = f.engine;
  eo.max_seqs = max_running;
  eo.max_logit_rows = max_running;
  eo.max_step_tokens = int64_t{f.scheduler.max_prefill_tokens} + max_running;
  // Without --max-prefill-tokens, a plan that streams routed experts at prefill takes a prompt of up
  // to kStreamedPrefillTokens in one forward (EngineOptions::streamed_step_tokens): each forward
  // streams the experts the cache lacks once.
  const bool prefill_given = f.cmd->count("--max-prefill-tokens") > 0;
  if (!prefill_given) eo.streamed_step_tokens = kStreamedPrefillTokens + max_running;
  finish_engine_options(*f.cmd, eo, f.compat);
  ProgressReporter progress;  // the load's phases on stderr
  eo.progress = &progress;

  // Threads started from here on inherit this mask: only the sigwait below sees SIGINT/SIGTERM, and
  // SIGHUP (a closed terminal or session), which stops the same way: its default action ended running
  // streams without `[DONE]`.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  signal(SIGPIPE, SIG_IGN);  // a client that went away must not kill the server

  const bool demo = f.model.empty();
  std::string path = f.model;
  if (demo) {
    path = write_demo_model();
    std::printf("No --model given: serving the built-in DEMO model (random weights). Its text is noise.\n");
  } else {
    std::error_code ec;
    uintmax_t size = fs::is_regular_file(path, ec) ? fs::file_size(path, ec) : 0;
    if (ec) size = 0;
    std::printf("Loading %s%s...\n", path.c_str(), size ? fmt::format(" ({})", format_bytes(static_cast<int64_t>(size))).c_str() : "");
  }
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Checkpoint> opened;
  // The demo file goes once the engines have opened it (the mappings stay valid); other ranks open it
  // again (--tensor-parallel-size).
  struct RemoveDemo {
    bool demo;
    std::string path;
    ~RemoveDemo() {
      if (demo) fs::remove(path);
    }
  } remove_demo{demo, path};
  opened = open_checkpoint(path);
  // The tokenizer and chat template before the weights: a checkpoint without a usable tokenizer (an
  // HF folder without tokenizer.json, say) or a bad --chat-template is refused in seconds, not after
  // the weights have loaded.
  Vocab vocab = serve_vocab(*opened);
  const ModelTemplate tmpl = model_chat_template(*opened, vocab, f.chat_template);
  const std::string& template_from = tmpl.origin;
  ChatTemplate chat_template(tmpl.source, tmpl.bos_token, tmpl.eos_token);
  const server::ToolCallFormat tool_call_format =
      f.server.tool_call_format.value_or(server::detect_tool_call_format(tmpl.source));
  const server::ReasoningFormat reasoning_format =
      f.server.reasoning_format.value_or(server::detect_reasoning_format(tmpl.source));
  std::unique_ptr<ServingEngine> loaded = ServingEngine::load(std::move(opened), path, eo);
  Engine* engine = &loaded->engine();  // rank 0's
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  const Checkpoint& ck = engine->checkpoint();
  const ModelConfig& mc = engine->config();

  const MemoryPlan& plan = engine->memory_plan();  // the banner's memory figures and /v1/stats' KV bytes
  int64_t n_params = 0;
  for (const TensorInfo& t : ck.tensors()) n_params += t.numel();

  ModelRunner& runner = loaded->runner();
  ServiceConfig sc;
  sc.scheduler = f.scheduler;
  if (!prefill_given && engine->options().max_step_tokens > eo.max_step_tokens)
    sc.scheduler.max_prefill_tokens = static_cast<int32_t>(engine->options().max_step_tokens - max_running);
  // The context limit: --max-seq-len, at most the model's context length (4096 when the checkpoint
  // does not say), and at most what the KV cache holds (the scheduler's clamp); warned when it cuts.
  sc.scheduler.max_seq_len = f.max_seq_len > 0 ? f.max_seq_len : (mc.n_ctx_train > 0 ? mc.n_ctx_train : 4096);
  if (mc.n_ctx_train > 0 && f.max_seq_len > mc.n_ctx_train) {
    spdlog::warn("--max-seq-len {} is more than the model's context length: clamped to {}", f.max_seq_len,
                 mc.n_ctx_train);
    sc.scheduler.max_seq_len = mc.n_ctx_train;
  }
  KvTiers tiers(*engine);  // --kv-host-gib, --prompt-cache-dir; outlives the service
  sc.tiers = tiers.view();
  EngineService service(runner, engine->kv().pools(), sc);
  const long long kv_held = static_cast<long long>(engine->kv().pool().n_pages()) * engine->kv().config().page_size;
  if (eo.kv_tokens > 0 && kv_held > eo.kv_tokens)
    spdlog::info("--kv-tokens {} is rounded up to {} (whole pages of {} tokens)", eo.kv_tokens, kv_held,
                 engine->kv().config().page_size);
  if ((f.max_seq_len > 0 || eo.kv_tokens > 0) && service.context_limit() < sc.scheduler.max_seq_len)
    spdlog::warn("the KV cache holds {} tokens: the context limit per request is clamped from {} to {} (raise --kv-tokens)",
                 kv_held, sc.scheduler.max_seq_len, service.context_limit());

  server::ServerOptions so = f.server;
  so.split_reasoning = reasoning_format != server::ReasoningFormat::kNone;
  so.http_threads = std::min(1024, max_running + f.scheduler.max_waiting + 16);
  server::ServedModel sm;
  sm.name = !f.served_model_name.empty() ? f.served_model_name
            : demo                       ? "freetoken-demo"
                                         : server::default_served_name(path);
  sm.arch = mc.arch;
  sm.path = demo ? "" : path;
  sm.n_params = n_params;
  sm.n_ctx_train = mc.n_ctx_train;
  sm.kv_bytes_per_token = plan.kv_bytes_per_token;
  sm.kv_bytes_total = plan.kv_bytes;
  sm.demo = demo;
  sm.vocab = &vocab;
  sm.chat_template = &chat_template;
  sm.tool_call_format = tool_call_format;
  sm.reasoning_format = reasoning_format;
  sm.object_tool_arguments = server::template_takes_object_arguments(chat_template);
  sm.renders_tools = server::template_renders_tools(chat_template);
  sm.moe_report = [e = engine] { return e->moe_report(); };
  sm.memory_rows = memory_rows(plan);
  sm.memory_limit = memory_limit(plan);
  if (RankGroup* group = loaded->group())
    for (int r = 0; r < group->size(); ++r) {
      Engine& re = group->engine(r);
      sm.ranks.push_back({memory_rows(re.memory_plan()), memory_limit(re.memory_plan()), [e = &re] { return e->moe_report(); }});
    }
  sm.resize_caches = [&service, e = engine](const CacheResize& r) { return resize_served_caches(service, *e, r); };
  server::HttpServer http(so, sm, service);
  const int port = http.bind();

  const KvCacheConfig& kc = engine->kv().config();
  std::printf("FreeToken serve\n");
  std::printf("  model     %s  [%s%s, %lld layers, %s params%s]%s\n", sm.name.c_str(), mc.arch.c_str(),
              demo ? " DEMO, random weights: text is noise" : "", static_cast<long long>(mc.n_layer),
              human_count(static_cast<double>(n_params)).c_str(),
              mc.n_expert > 0 ? fmt::format(", {} experts top-{}", mc.n_expert, mc.n_expert_used).c_str() : "",
              demo ? "" : fmt::format("  {}", path).c_str());
  const std::string tool_calls =
      sm.renders_tools
          ? fmt::format("{}{}", server::tool_call_format_name(sm.tool_call_format),
                        f.server.tool_call_format ? " (--tool-call-parser)" : "")
          : std::string("none: the template does not render tools, so requests with tools get 400");
  const std::string reasoning =
      reasoning_format == server::ReasoningFormat::kNone
          ? std::string("none")
          : fmt::format("{} ({}...{}){}", server::reasoning_format_name(reasoning_format),
                        server::reasoning_tags(reasoning_format).open, server::reasoning_tags(reasoning_format).close,
                        f.server.reasoning_format ? " (flag)" : "") +
      (!so.enable_thinking ? "" : fmt::format(", enable_thinking {} unless asked (--reasoning)", *so.enable_thinking));
  std::printf("  tokenizer %d tokens; chat template from %s (tool calls: %s; reasoning: %s)\n", vocab.n_tokens(),
              template_from.c_str(), tool_calls.c_str(), reasoning.c_str());
  std::printf("%s", memory_banner(*engine, eo.threads).c_str());
  if (RankGroup* group = loaded->group())
    std::printf("  ranks     %d (tensor parallel%s); the table is rank 0's, every rank's plan is in /v1/stats "
                "\"ranks\" and /metrics (rank=\"R\")\n",
                group->size(), group->experts_split() ? ", experts split over the ranks" : "");
  if (const PagePool* swa = engine->kv().swa_pool()) {
    int n_swa = 0;
    for (int32_t l = 0; l < kc.n_layer; ++l) n_swa += engine->kv().in_swa_pool(l);
    std::printf("  swa       %d of %d layers slide (window %d): their KV holds %lld tokens over all requests, not the "
                "context (--swa-kv-tokens; in the KV bytes above)\n",
                n_swa, kc.n_layer, kc.swa_window(), static_cast<long long>(swa->n_pages()) * kc.page_size);
  }
  if (f.state_snapshots_given && !engine->kv().state_pool())
    spdlog::warn("--state-snapshots {}: the model has no linear-attention layers, so there is no recurrent state to keep",
                 eo.state_snapshots);
  if (const PagePool* states = engine->kv().state_pool()) {
    int n_rec = 0;
    for (int32_t l = 0; l < kc.n_layer; ++l) n_rec += kc.is_recurrent(l);
    std::printf("  state     %d of %d layers are linear attention: %s of recurrent state per request, %d slots (%d "
                "running + %d prefix-cache snapshots, --state-snapshots; in the KV bytes above)\n",
                n_rec, kc.n_layer, format_bytes(kc.state_bytes_per_slot()).c_str(), states->n_pages(), max_running,
                states->n_pages() - max_running);
  }
  if (plan.moe) std::printf("  %s\n", plan.moe->summary().c_str());
  std::printf("  limits    context %lld tokens (model %lld), %d running, %d waiting, %d prefill tokens/step, body %g MiB\n",
              static_cast<long long>(service.context_limit()), static_cast<long long>(mc.n_ctx_train), max_running,
              f.scheduler.max_waiting, sc.scheduler.max_prefill_tokens, so.max_body_mb);
  std::printf("  loaded in %.2f s; auth %s\n", load_s, so.api_key.empty() ? "off" : "on (API key required)");
  // A wildcard address is where the server listens, not an address to open: the banner gives this
  // machine's loopback address for that.
  const std::string& host = so.host;
  const bool wildcard = host == "0.0.0.0" || host == "::" || host == "[::]";
  const std::string local = !wildcard ? server::url_host(host) : host == "0.0.0.0" ? "127.0.0.1" : "[::1]";
  std::printf("  listening on http://%s:%d/v1  (Ctrl-C to stop)%s\n", server::url_host(host).c_str(), port,
              wildcard ? fmt::format("; every address of this machine: http://{}:{}/v1 from it", local, port).c_str()
                       : "");
  if (so.webui) std::printf("  chat page http://%s:%d/\n", local.c_str(), port);
  if (so.api_key.empty() && !server::is_loopback_host(host))  // --allow-unauthenticated
    std::printf("WARNING: %s is reachable from other machines and no --api-key is set: anyone can use this server.\n",
                host.c_str());
  std::fflush(stdout);

  std::atomic<bool> served{false};
  std::thread http_thread([&] {
    http.serve();
    served = true;
  });
  int sig = 0;
  while (!served) {
    timespec ts{0, 200 * 1000 * 1000};
    const int s = sigtimedwait(&stop_signals, nullptr, &ts);
    if (s > 0) {
      sig = s;
      break;
    }
  }
  if (sig)
    std::printf("\n%s received: stopping (running requests get %d s to finish)\n",
                sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : "SIGTERM", f.shutdown_grace_s);
  std::fflush(stdout);
  // Running requests finish (new ones are refused) within the grace period; then their event
  // streams drain to `data: [DONE]` before the listener and its connections close.
  service.shutdown(std::chrono::seconds(f.shutdown_grace_s));
  for (int i = 0; i < 100 && http.context().open_streams.load() > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  http.stop();
  http_thread.join();
  std::printf("stopped\n");
  return 0;
}

}  // namespace

void add_serve_command(CLI::App& app, Action& action) {
  auto f = std::make_shared<ServeArgs>();
  f->scheduler.max_waiting = 128;  // ft serve's default (the scheduler's own is 1024)
  CLI::App* cmd = app.add_subcommand("serve", "Serve a model over HTTP: the OpenAI API (chat, completions) and Anthropic's Messages API");
  // Model: what is served and how its replies are read.
  add_model_arg(cmd, f->model_arg, "GGUF file or Hugging Face folder (default: the built-in demo model)");
  const char* model = kGroupModel;
  cmd->add_option("-a,--served-model-name,--alias", f->served_model_name,
                  "Model name clients use (default: the file name; llama-server's -a/--alias)")
      ->check(non_empty("must not be empty (leave the flag out for the file's name)", "NAME"))
      ->group(model);
  cmd->add_option("--chat-template,--chat-template-file", f->chat_template,
                  "Jinja chat template file (default: the model's own)")
      ->group(model);
  // The parser flags set ServerOptions' typed fields ("auto": nullopt, the template's); an unknown
  // name is refused while parsing, listing the valid ones.
  auto add_parser = [&](const std::string& flag, auto& field, auto from_name, const std::string& names,
                        const std::string& help) {
    cmd->add_option_function<std::string>(
           flag, [&field, from_name](const std::string& v) { field = v == "auto" ? std::nullopt : from_name(v); },
           help + ": auto (chosen from the chat template), " + names)
        ->default_str("auto")
        ->check(CLI::Validator(
            [from_name, names](std::string& v) {
              return v == "auto" || from_name(v) ? std::string() : "unknown parser '" + v + "'; valid: auto, " + names;
            },
            "NAME"))
        ->group(model);
  };
  add_parser("--tool-call-parser", f->server.tool_call_format, server::tool_call_format_from_name,
             server::tool_call_format_names(), "How replies carry tool calls (vLLM's parser names)");
  add_parser("--reasoning-parser", f->server.reasoning_format, server::reasoning_format_from_name,
             server::reasoning_format_names(), "How replies carry reasoning, split into reasoning_content");
  cmd->add_option_function<std::string>(
         "--reasoning-format",
         [f, cmd](const std::string& v) {
           if (cmd->count("--reasoning-parser") > 0) return;  // the parser flag names the format itself
           if (v == "none") f->server.reasoning_format = server::ReasoningFormat::kNone;
           if (v == "deepseek") f->server.reasoning_format = server::ReasoningFormat::kThink;
         },
         "llama.cpp's form of --reasoning-parser: auto (the template's), none (replies as the model wrote "
         "them), deepseek (a leading <think> block goes to reasoning_content)")
      ->default_str("auto")
      ->check(CLI::IsMember({"auto", "none", "deepseek"}))
      ->group(model);

  // Server: where it listens, who may use it, how many at once.
  const char* server = kGroupServer;
  cmd->add_option("--host", f->server.host, "Address to listen on")->capture_default_str()->group(server);
  cmd->add_option("--port", f->server.port, "Port (0: any free port)")->capture_default_str()->group(server);
  cmd->add_option("--api-key", f->server.api_key, "Require 'Authorization: Bearer KEY' (or x-api-key) on every API route (/health, the chat page's files and "
                  "/favicon.ico stay open)")
      ->check(non_empty("must not be empty (leave the flag out to serve without auth)", "KEY"))
      ->group(server);
  cmd->add_option("--api-key-file", f->api_key_file,
                  "Read --api-key's KEY from this file's one non-empty line (llama-server's flag; keeps the key out "
                  "of the process list)")
      ->type_name("FILE")
      ->group(server);
  cmd->add_flag("--allow-unauthenticated", f->server.allow_unauthenticated,
                "Serve on a --host other machines can reach without --api-key (refused otherwise)")
      ->group(server);
  cmd->add_flag_callback("--no-webui", [f] { f->server.webui = false; }, "Serve no chat page at / (the API only)")->group(server);
  cmd->add_option("--max-running-requests,--parallel", f->scheduler.max_running,
                  "Requests generating at once (llama.cpp's -np/--parallel)")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(server);
  cmd->add_option("--max-waiting-requests", f->scheduler.max_waiting, "Requests queued beyond those (more get 503)")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(server);
  cmd->add_option("--max-body-mb", f->server.max_body_mb, "Largest request body in MiB (larger: 413)")
      ->capture_default_str()
      ->group(server);
  cmd->add_option("--cors-origin", f->server.cors_origin,
                  "Access-Control-Allow-Origin for browser pages on other origins ('*': any origin; off by default). "
                  "While on, POST bodies must be sent as application/json (415 for text/plain and form encodings)")
      ->capture_default_str()
      ->group(server);
  cmd->add_option("--request-timeout", f->server.request_timeout_s,
                  "Seconds after which a request ends with finish_reason \"length\", generating or still queued (0: "
                  "none); a request's own \"timeout\" field may only shorten it")
      ->capture_default_str()
      ->check(CLI::Range(0.0, 7 * 86400.0))
      ->group(server);
  cmd->add_option("--shutdown-grace", f->shutdown_grace_s, "Seconds running requests get to finish on SIGINT/SIGTERM/SIGHUP")
      ->capture_default_str()
      ->check(at_least(0))
      ->group(server);

  // Memory: the context and the KV cache. --max-seq-len-override, --num-tokens, --max-prefill-length:
  // the Python FreeToken engine's names, with the same meaning.
  const char* memory = kGroupMemory;
  cmd->add_option("--max-seq-len,--max-seq-len-override", f->max_seq_len,
                  "Context limit per request (default and most: the model's context length; also at most "
                  "--kv-tokens)")
      ->check(at_least(2))
      ->group(memory);
  // llama-server's -c is the KV cache its slots share (a request may use all of it with a unified KV
  // cache): that is --kv-tokens here, not --max-seq-len.
  cmd->add_option("-c,--kv-tokens,--ctx-size,--num-tokens", f->engine.kv_tokens,
                  "KV cache size in tokens over all requests (default: min(context, 8192)); each request's context "
                  "is at most this. llama.cpp's -c/--ctx-size means the same: the KV cache the running requests "
                  "share (0, the model's context there, is refused here: give a number)")
      // 0 is the engine's "default" value: a user asking for 0 gets an error, not 8192
      ->check(at_least(1, "a KV cache size in tokens; leave the flag out for the default, min(context, 8192)"))
      ->group(memory);
  cmd->add_option("--max-prefill-tokens,--max-prefill-length", f->scheduler.max_prefill_tokens,
                  "Prompt tokens per step (chunked prefill); without the flag, 8192 where the plan streams routed "
                  "experts from host memory at prefill (offload, hybrid: each step streams them once)")
      ->capture_default_str()
      ->check(at_least(1))
      ->group(memory);
  cmd->add_option("--swa-kv-tokens", f->engine.swa_kv_tokens,
                  "KV tokens of the sliding-window layers (gpt-oss's every other layer) over all requests: at least "
                  "what the running requests' windows need (the default), at most --kv-tokens; more keeps more "
                  "conversations' last windows for prefix-cache hits")
      ->check(at_least(1))
      ->group(memory);
  cmd->add_option("--state-snapshots", f->engine.state_snapshots,
                  "Linear-attention models (Qwen3-Next, Qwen3.5): recurrent states kept for prefix-cache hits beyond "
                  "one per running request, each the state at the last page boundary of a cached prompt (a later "
                  "request hits only where it repeats such a prompt whole); 0 keeps only what idle running slots hold")
      ->capture_default_str()
      ->check(in_range(0, kMaxStateSnapshots))
      ->group(memory);

  // Sampling defaults: for requests that do not say.
  const char* sampling = kGroupSamplingDefaults;
  for (const char* names : {"--temp", "--top-k", "--top-p", "--min-p", "--repeat-penalty", "-n,--n-predict"})
    cmd->add_option(names, f->llama_sampling[names])->group("");  // hidden: refused in run_serve
  cmd->add_option_function<int64_t>(
         "--seed",
         [f](int64_t seed) {
           if (seed >= 0) f->server.default_seed = static_cast<uint64_t>(seed);
           else f->server.default_seed.reset();
         },
         "Sampling seed for requests that give none (-1: random per request, as in llama.cpp)")
      ->check(at_least(-1))
      ->default_str("-1")
      ->group(sampling);
  cmd->add_option_function<std::string>(
         "--reasoning",
         [f](const std::string& v) {
           if (v == "auto") f->server.enable_thinking.reset();
           else f->server.enable_thinking = v == "on";
         },
         "Whether thinking models think, for requests that do not say (chat_template_kwargs.enable_thinking, "
         "Anthropic's thinking): on or off sets the chat template's enable_thinking; auto leaves the "
         "template's default")
      ->default_str("auto")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->group(sampling);

  add_engine_flags(cmd, f->engine, f->compat);  // Engine, Memory, MoE expert offload, Logging
  cmd->callback([f, cmd, &action] {
    f->state_snapshots_given = cmd->count("--state-snapshots") > 0;
    f->cmd = cmd;
    f->model = resolve_model(f->model_arg);
    action = [f] {
      if (!f->api_key_file.empty()) f->server.api_key = api_key_from_file(f->api_key_file, f->server.api_key);
      return run_serve(*f);
    };
  });
}

}  // namespace ft::cli
