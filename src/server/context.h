#pragma once
// ServerContext: what every route handler shares (options, the served model, the engine service) and
// the small helpers they all use: auth, JSON responses, error responses, ids.
#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "server/http_types.h"
#include <nlohmann/json.hpp>

#include "engine/cache_resize.h"
#include "engine/memory_plan.h"
#include "engine/moe_runtime.h"
#include "engine/service.h"
#include "server/errors.h"
#include "server/reasoning.h"
#include "server/response_store.h"
#include "server/structured_output.h"
#include "server/tool_calls.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/vocab.h"

namespace ft::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 1919;               // 0: any free port (see HttpServer::bind)
  std::string api_key;           // empty: no auth
  double max_body_mb = 32.0;     // larger bodies get 413
  int http_threads = 0;          // 0: max_running + max_waiting + 16, capped at 512
  int keepalive_ms = 250;        // SSE comment sent when a stream was silent this long (disconnect probe)
  std::optional<uint64_t> default_seed;  // sampling seed of requests that give none (--seed)
  /** Access-Control-Allow-Origin of every response, and the answer to CORS preflights (OPTIONS), so
   *  browser clients on other origins can call the API ("*": any origin); empty (the default: the
   *  web page is same-origin): no CORS headers, and a preflight gets 405. While set, a POST whose
   *  Content-Type a page may send without a preflight (text/plain, form encodings) gets 415. */
  std::string cors_origin;
  /** --request-timeout: seconds after which a request ends with finish_reason "length" (generating or
   *  still queued); 0: none. A request's own `timeout` may only shorten it. */
  double request_timeout_s = 0;
  /** Whether a chat reply's reasoning block goes to reasoning_content (reasoning.h, in
   *  ServedModel::reasoning_format) unless the request says otherwise: `ft serve` sets it when the
   *  template's model writes one (--reasoning-parser none: false); false: replies are left as the
   *  model wrote them. */
  bool split_reasoning = false;
  /** --tool-call-parser: how replies carry tool calls (vLLM's parser names); nullopt (auto): the chat
   *  template's (detect_tool_call_format), chosen once the template is read. */
  std::optional<ToolCallFormat> tool_call_format;
  /** --reasoning-parser (or llama.cpp's --reasoning-format none|deepseek): how replies carry reasoning;
   *  nullopt (auto): the chat template's (detect_reasoning_format). */
  std::optional<ReasoningFormat> reasoning_format;
  /** --reasoning on|off: the chat template's enable_thinking for requests that set none
   *  (chat_template_kwargs, Anthropic's thinking); unset (auto): the template's own default. */
  std::optional<bool> enable_thinking;
  /** Serve the chat page (web/) at / (--no-webui: false, and / is 404). */
  bool webui = true;
  /** --allow-unauthenticated: serve on a host other machines can reach without an api_key (validate
   *  refuses that otherwise). */
  bool allow_unauthenticated = false;

  /** Throws ft::Error(kInvalidArgument) naming the flag for a port outside 0..65535, a max_body_mb not
   *  above 0, and a host other machines can reach (is_loopback_host) with no api_key unless
   *  allow_unauthenticated. `ft serve` calls it before anything loads. */
  void validate() const;
};

/** The model behind the API. Pointers must outlive the server. */
struct ServedModel {
  std::string name;              // --served-model-name (what `model` must equal)
  std::string arch;
  std::string path;              // checkpoint path, or "" for the demo model
  int64_t n_params = 0;
  int64_t n_ctx_train = 0;       // the model's own context length
  /** KV cache bytes one token takes in every layer (MLA: its latent and RoPE key only). */
  int64_t kv_bytes_per_token = 0;
  /** KV cache bytes in all (sliding-window layers hold fewer pages than the others). */
  int64_t kv_bytes_total = 0;
  bool demo = false;
  const Vocab* vocab = nullptr;
  const ChatTemplate* chat_template = nullptr;
  /** How replies carry tool calls: detect_tool_call_format of the chat template's source, or
   *  --tool-call-parser. */
  ToolCallFormat tool_call_format = ToolCallFormat::kHermes;
  /** How replies carry reasoning: detect_reasoning_format of the chat template's source, or
   *  --reasoning-parser (kNone: the template's model writes none, or the flag said none). */
  ReasoningFormat reasoning_format = ReasoningFormat::kNone;
  /** The template is given tool-call arguments as JSON values, not text (template_takes_object_arguments). */
  bool object_tool_arguments = false;
  /** The template puts a request's tools into the prompt (template_renders_tools); false: requests
   *  with tools (tool_choice other than "none") are refused, as the model would never see them. */
  bool renders_tools = true;
  std::function<std::optional<MoeReport>()> moe_report;  // MoE counters for /v1/stats, /metrics (unset or nullopt: none)
  /** The memory plan's rows (engine/memory_plan.h memory_rows) and limit (0: none), for /v1/stats. */
  std::vector<MemoryRow> memory_rows;
  int64_t memory_limit = 0;
  /** One rank of a rank group (--tensor-parallel-size): its memory plan and MoE counters. */
  struct Rank {
    std::vector<MemoryRow> memory_rows;
    int64_t memory_limit = 0;
    std::function<std::optional<MoeReport>()> moe_report;
  };
  /** Every rank, in rank order, for /v1/stats' "ranks" (empty: one rank; the fields above are then the
   *  only engine's, and with ranks rank 0's). */
  std::vector<Rank> ranks;
  /** POST /v1/admin/cache (server/admin.cpp): resizes the running engine's KV and expert caches
   *  between steps and returns the sizes after (`ft serve`: resize_served_caches). Unset: the route
   *  answers 501 (no engine to resize). */
  std::function<CacheSizes(const CacheResize&)> resize_caches;
};

/** The name a checkpoint at `path` is served under when --served-model-name gives none: a file's
 *  stem (`model` for /m/model.gguf), a folder's name as it is (`Qwen3-0.6B`, not cut at its dot).
 *  Trailing slashes are ignored, and `.` or `..` name the folder they resolve to. */
std::string default_served_name(const std::string& path);

struct ServerContext {
  ServerOptions options;
  ServedModel model;
  /** Guards model.memory_rows, memory_limit and kv_bytes_total, which POST /v1/admin/cache changes
   *  while /v1/stats reads them. */
  mutable std::mutex memory_mu;
  EngineService* service = nullptr;
  int64_t created = 0;  // unix seconds at start-up
  std::atomic<uint64_t> counter{0};
  /** SSE responses still being written (a graceful shutdown waits for them to drain). */
  std::atomic<int> open_streams{0};
  /** Responses sent with an error status (4xx/5xx: bad input, auth, unknown route or method, body too
   *  large, context length, overload, ...), counted in one place: HttpServer's `finished` transport
   *  hook, which runs for every response. /v1/stats requests.rejected, /metrics requests_rejected_total. */
  std::atomic<int64_t> requests_rejected{0};
  /** The Responses API's stored responses (GET / DELETE /v1/responses/{id}, previous_response_id). */
  ResponseStore responses;
  /** Compiled structured-output grammars and the vocabulary's token trie (structured_output.h). */
  StructuredOutputs structured;

  /** "chatcmpl-" + 24 hex digits, unique per process. */
  std::string new_id(const char* prefix);
  /** A tool call's id: "call_" + 24 hex digits, or for the Mistral format 9 letters and digits (its
   *  templates refuse any other id when the call comes back in the history, as vLLM's Mistral parser
   *  issues them). */
  std::string tool_call_id();
  /** True when the request carries the API key (or none is configured). */
  bool authorized(const HttpRequest& req) const;
  /** Throws ApiException 404 model_not_found unless `requested` is the served name (or empty, when
   *  `allow_empty`: a request body may leave "model" out). */
  void check_model(const std::string& requested, bool allow_empty = true) const;
};

/** Seconds since the Unix epoch. */
int64_t unix_time();

/** Writes `body` as application/json with `status`. */
void send_json(HttpResponse& res, int status, const nlohmann::json& body);
void send_json(HttpResponse& res, int status, const nlohmann::ordered_json& body);
/** Writes the error body for `e` in the shape of the API `req` went to: Anthropic's on its routes
 *  (is_anthropic_path), OpenAI's elsewhere; its type, code and message go into req's trace for the
 *  request's log line. */
void send_error(const HttpRequest& req, HttpResponse& res, const ApiError& e);

/** True for the Content-Types a browser page may POST cross-origin without a preflight (text/plain,
 *  application/x-www-form-urlencoded, multipart/form-data; parameters and case ignored). */
bool is_cors_simple_body(std::string_view content_type);

/** Runs `fn` and turns whatever it throws into an error response (ApiException as is, ft::Error via
 *  api_error_from, anything else 500; in the shape of the route's API, see send_error). Checks the
 *  API key first when `auth` is true. */
void guarded(ServerContext& ctx, const HttpRequest& req, HttpResponse& res, bool auth,
             const std::function<void()>& fn);

}  // namespace ft::server
