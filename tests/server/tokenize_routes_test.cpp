// llama.cpp's utility endpoints on `ft serve`: POST /tokenize (add_special, parse_special,
// with_pieces), /detokenize and /apply-template, against the served vocabulary and chat template.
#include <gtest/gtest.h>

#include "server/server_fixture.h"

namespace ft {
namespace {

using json = nlohmann::json;
using testing::post;
using testing::Reply;
using testing::TestServer;
using testing::TestServerConfig;

std::vector<int32_t> ids_of(const Reply& r) {
  std::vector<int32_t> out;
  for (const json& t : r.body["tokens"]) out.push_back(t.get<int32_t>());
  return out;
}

void expect_bad_request(const Reply& r, const std::string& param) {
  EXPECT_EQ(r.status, 400) << r.raw;
  EXPECT_EQ(r.body["error"]["type"], "invalid_request_error") << r.raw;
  EXPECT_EQ(r.body["error"]["param"], param) << r.raw;
}

TEST(TokenizeRoutes, TokenizeAndDetokenizeUseTheServedVocabulary) {
  TestServer s;
  auto c = s.client();
  const Vocab& v = testing::demo_vocab();
  const std::string text = "Hello <|im_end|> wörld";
  const Reply plain = post(c, "/tokenize", json{{"content", text}}.dump());
  ASSERT_EQ(plain.status, 200) << plain.raw;
  EXPECT_EQ(ids_of(plain), v.encode(text, EncodeOptions{false, true}));  // llama.cpp's defaults
  const Reply literal = post(c, "/tokenize", json{{"content", text}, {"parse_special", false}}.dump());
  EXPECT_EQ(ids_of(literal), v.encode(text, EncodeOptions{false, false}));
  EXPECT_NE(ids_of(literal), ids_of(plain)) << "<|im_end|> is one token only when special tokens are parsed";
  // (add_special is passed to the vocabulary; the demo vocabulary adds no BOS, so it is not told apart here.)

  // with_pieces: each token's bytes, as text when they are valid UTF-8 alone, else as byte values.
  const Reply pieces = post(c, "/tokenize", json{{"content", text}, {"with_pieces", true}}.dump());
  ASSERT_EQ(pieces.status, 200) << pieces.raw;
  std::string joined;
  bool some_bytes = false;
  for (const json& t : pieces.body["tokens"]) {
    const std::string& piece = v.piece(t["id"].get<int32_t>());
    if (t["piece"].is_string()) {
      EXPECT_EQ(t["piece"], piece);
    } else {
      std::string bytes;
      for (const json& b : t["piece"]) bytes.push_back(static_cast<char>(b.get<int>()));
      EXPECT_EQ(bytes, piece);
      some_bytes = true;
    }
    joined += piece;
  }
  EXPECT_EQ(joined, text);
  EXPECT_TRUE(some_bytes) << "ö is two byte tokens in the demo vocabulary: " << pieces.raw;

  const Reply back = post(c, "/detokenize", json{{"tokens", plain.body["tokens"]}}.dump());
  ASSERT_EQ(back.status, 200) << back.raw;
  EXPECT_EQ(back.body["content"], text);

  expect_bad_request(post(c, "/tokenize", "{}"), "content");
  expect_bad_request(post(c, "/tokenize", json{{"content", 5}}.dump()), "content");
  expect_bad_request(post(c, "/detokenize", json{{"tokens", {1, -1}}}.dump()), "tokens");
  expect_bad_request(post(c, "/detokenize", json{{"tokens", {v.n_tokens()}}}.dump()), "tokens");
  expect_bad_request(post(c, "/detokenize", json{{"tokens", "abc"}}.dump()), "tokens");
}

TEST(TokenizeRoutes, ApplyTemplateGivesTheChatPrompt) {
  TestServerConfig cfg;
  cfg.api_key = "k";
  TestServer s(cfg);
  auto c = s.client();
  const httplib::Headers auth = {{"Authorization", "Bearer k"}};
  const json msgs = {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}};
  const Reply r = post(c, "/apply-template", json{{"messages", msgs}}.dump(), auth);
  ASSERT_EQ(r.status, 200) << r.raw;
  const ChatTemplate t(kChatMLTemplate, "", "<|im_end|>");
  EXPECT_EQ(r.body["prompt"], t.render(nlohmann::ordered_json::parse(msgs.dump()), nullptr, true));
  EXPECT_EQ(post(c, "/apply-template", json{{"messages", msgs}}.dump()).status, 401);
  EXPECT_EQ(post(c, "/tokenize", json{{"content", "x"}}.dump()).status, 401);
  EXPECT_EQ(post(c, "/detokenize", json{{"tokens", {1}}}.dump()).status, 401);
  EXPECT_EQ(post(c, "/apply-template", json{{"model", "other"}, {"messages", msgs}}.dump(), auth).status, 404);
  expect_bad_request(post(c, "/apply-template", "{}", auth), "messages");
  // vLLM's continue_final_message: the prompt ends in the assistant message's text, with no end of turn
  json cont = msgs;
  cont.push_back({{"role", "assistant"}, {"content", "Hello, I"}});
  const Reply p = post(c, "/apply-template",
                       json{{"messages", cont}, {"continue_final_message", true}, {"add_generation_prompt", false}}.dump(),
                       auth);
  ASSERT_EQ(p.status, 200) << p.raw;
  EXPECT_EQ(p.body["prompt"], t.render(nlohmann::ordered_json::parse(msgs.dump()), nullptr, true) + "Hello, I");
  const std::string prompt = p.body["prompt"].get<std::string>(), tail = "<|im_start|>assistant\nHello, I";
  EXPECT_EQ(prompt.substr(prompt.size() - tail.size()), tail);  // one assistant turn, left open
}

}  // namespace
}  // namespace ft
