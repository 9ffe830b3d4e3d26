#pragma once
// Route registration, one function per API surface (each in its own file).
#include <string_view>

#include "server/context.h"
#include "server/router.h"

namespace ft::server {

/** POST /v1/chat/completions (server/openai_chat.cpp). */
void add_chat_routes(Router& r, ServerContext& ctx);
/** POST /v1/responses, GET and DELETE /v1/responses/{id}: OpenAI's Responses API
 *  (server/openai_responses.cpp). */
void add_responses_routes(Router& r, ServerContext& ctx);
/** POST /v1/messages, POST /v1/messages/count_tokens: Anthropic's Messages API
 *  (server/anthropic_messages.cpp). */
void add_anthropic_routes(Router& r, ServerContext& ctx);
/** POST /v1/completions (server/openai_completions.cpp). */
void add_completion_routes(Router& r, ServerContext& ctx);
/** POST /completion: llama.cpp server's native completion endpoint (server/llama_completion.cpp). */
void add_llama_completion_routes(Router& r, ServerContext& ctx);
/** GET /v1/models, GET /v1/models/{id} (server/models.cpp). */
void add_model_routes(Router& r, ServerContext& ctx);
/** GET /v1/stats (JSON) and GET /metrics (Prometheus text) (server/stats.cpp). */
void add_stats_routes(Router& r, ServerContext& ctx);
/** GET /props: llama.cpp server's model and default-settings properties (server/props.cpp). */
void add_props_routes(Router& r, ServerContext& ctx);
/** GET /health, open without an API key (server/health.cpp). */
void add_health_routes(Router& r, ServerContext& ctx);
/** POST /tokenize, /detokenize, /apply-template: llama.cpp server's utility endpoints
 *  (server/tokenize.cpp). */
void add_tokenize_routes(Router& r, ServerContext& ctx);
/** GET / and the chat page's files (web/), open without an API key; registered unless --no-webui
 *  (ServerOptions::webui) (server/webui.cpp). */
void add_webui_routes(Router& r, ServerContext& ctx);
/** Whether `path` is "/" or a file of the chat page (what add_webui_routes serves). */
bool is_web_page_path(std::string_view path);
/** GET /favicon.ico: web/favicon.svg (204 No Content if web/ had none), open without an API key and
 *  registered with --no-webui too, so a browser's automatic request for it is never a 404
 *  (server/webui.cpp). */
void add_favicon_route(Router& r);
/** Whether `path` is "/favicon.ico" (what add_favicon_route serves). */
bool is_favicon_path(std::string_view path);
/** POST /v1/admin/cache: resizes the running engine's expert cache and KV cache
 *  (ServedModel::resize_caches; server/admin.cpp). */
void add_admin_routes(Router& r, ServerContext& ctx);
/** The memory object of /v1/stats (`memory`) for `rows` and `limit` (server/stats.cpp). */
nlohmann::ordered_json memory_json(const std::vector<MemoryRow>& rows, int64_t limit);
/** GET /v1 and /v1/: what this server is, its OpenAI and Anthropic base URLs and where the model
 *  list and chat page are, as a small JSON object; behind the API key like every /v1 route
 *  (server/api_index.cpp). */
void add_api_index_routes(Router& r, ServerContext& ctx);

}  // namespace ft::server
