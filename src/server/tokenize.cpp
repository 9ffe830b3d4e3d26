// POST /tokenize, /detokenize and /apply-template: the utility endpoints of llama.cpp's server, with
// its field names. /tokenize {content, add_special (false), parse_special (true), with_pieces (false)}
// -> {tokens: [id, ...]} or, with pieces, [{id, piece}] where a piece that is not valid UTF-8 on its
// own (a byte token, part of a character) is a list of its bytes; /detokenize {tokens} -> {content};
// /apply-template {messages, tools, chat_template_kwargs, ...: a chat completion body} -> {prompt},
// the text the chat routes would feed the model.
#include "server/chat_reply.h"
#include "server/errors.h"
#include "server/json_fields.h"
#include "server/request_parse.h"
#include "server/routes.h"
#include "tokenizer/utf8.h"

namespace ft::server {

using ojson = nlohmann::ordered_json;

namespace {

/** A token's piece for with_pieces: its text, or its bytes when they are not valid UTF-8 alone. */
ojson piece_json(const std::string& piece) {
  if (utf8_first_invalid(piece) == std::string::npos) return piece;
  ojson bytes = ojson::array();
  for (unsigned char b : piece) bytes.push_back(static_cast<int>(b));
  return bytes;
}

ojson tokenize(const ServerContext& ctx, const ojson& body) {
  const ojson* content = field(body, "content");
  if (!content || !content->is_string()) bad_request("content", "'content' is required and must be a string");
  const EncodeOptions opts{get_bool(body, "add_special", false), get_bool(body, "parse_special", true)};
  const bool with_pieces = get_bool(body, "with_pieces", false);
  const Vocab& vocab = *ctx.model.vocab;
  ojson tokens = ojson::array();
  for (int32_t id : vocab.encode(content->get_ref<const std::string&>(), opts)) {
    if (with_pieces) tokens.push_back({{"id", id}, {"piece", piece_json(vocab.piece(id))}});
    else tokens.push_back(id);
  }
  return {{"tokens", std::move(tokens)}};
}

ojson detokenize(const ServerContext& ctx, const ojson& body) {
  const ojson* tokens = field(body, "tokens");
  if (!tokens || !tokens->is_array()) bad_request("tokens", "'tokens' is required and must be a list of token ids");
  const Vocab& vocab = *ctx.model.vocab;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < tokens->size(); ++i) {
    const ojson& t = (*tokens)[i];
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab.n_tokens())
      bad_request("tokens", fmt::format("tokens[{}] must be a token id in [0, {}), got {}", i, vocab.n_tokens(), t.dump()));
    ids.push_back(t.get<int32_t>());
  }
  return {{"content", vocab.decode(ids, /*skip_special=*/false)}};
}

}  // namespace

void add_tokenize_routes(Router& r, ServerContext& ctx) {
  r.post(R"(/tokenize/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { send_json(res, 200, tokenize(ctx, parse_json_body(body))); });
  });
  r.post(R"(/detokenize/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] { send_json(res, 200, detokenize(ctx, parse_json_body(body))); });
  });
  r.post(R"(/apply-template/?)", [&ctx](const HttpRequest& req, HttpResponse& res, const std::string& body) {
    guarded(ctx, req, res, true, [&] {
      const ChatRequest chat = parse_chat_request(parse_json_body(body));
      ctx.check_model(chat.gen.model);
      send_json(res, 200, ojson{{"prompt", render_chat_text(ctx, chat)}});
    });
  });
}

}  // namespace ft::server
