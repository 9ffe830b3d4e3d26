// GET /props: llama.cpp server's properties of the served model (llama.cpp tools/server/README.md,
// "GET /props"), for the clients that read the context size, the chat template or the special tokens
// there (llama.cpp's web UI among them): default_generation_settings (n_ctx, and in params the
// sampling settings a request that sets none gets: parse_generation_params of an empty body, the
// server's --seed, n_predict -1 as on POST /completion), total_slots (--max-running-requests),
// model_alias (the served name), model_path, chat_template (its source), bos_token and eos_token (their
// text; "" when the vocabulary has none), modalities (text only here) and build_info. Behind the API
// key, as llama.cpp keeps it. llama.cpp's POST /props (settings changed at run time) is not served: 405.
#include <fmt/format.h>

#include "server/generation.h"
#include "server/request_parse.h"
#include "server/routes.h"
#include "util/version.h"

namespace ft::server {

namespace {

using ojson = nlohmann::ordered_json;

ojson props(const ServerContext& ctx) {
  GenerationParams defaults = parse_generation_params(ojson::object());
  defaults.max_tokens.reset();
  if (!defaults.sampling.seed) defaults.sampling.seed = ctx.options.default_seed;
  const Vocab& vocab = *ctx.model.vocab;
  auto token_text = [&vocab](int32_t id) { return id >= 0 ? vocab.piece(id) : std::string(); };
  ojson settings;
  settings["n_ctx"] = ctx.service->context_limit();
  settings["params"] = llama_generation_settings(defaults);
  ojson j;
  j["default_generation_settings"] = settings;
  j["total_slots"] = ctx.service->max_running();
  j["model_alias"] = ctx.model.name;
  j["model_path"] = ctx.model.path;
  j["chat_template"] = ctx.model.chat_template ? ctx.model.chat_template->source() : std::string();
  j["bos_token"] = token_text(vocab.bos());
  j["eos_token"] = token_text(vocab.eos());
  j["modalities"] = {{"vision", false}, {"audio", false}};
  j["build_info"] = fmt::format("freetoken {} ({})", kVersion, kBackends);
  return j;
}

}  // namespace

void add_props_routes(Router& r, ServerContext& ctx) {
  r.get(R"(/props/?)", [&ctx](const HttpRequest& req, HttpResponse& res) {
    guarded(ctx, req, res, true, [&] { send_json(res, 200, props(ctx)); });
  });
}

}  // namespace ft::server
