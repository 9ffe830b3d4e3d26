// The chat page's routes (server/webui.cpp): GET / and the files of web/, built into the binary, with
// their Content-Type and Cache-Control: no-cache, open without the API key (API routes still need it);
// an unknown file is 404, and with --no-webui (ServerOptions::webui = false) / is 404 as well.
// The page's icon (/favicon.svg, and /favicon.ico for browsers that ask for it) and GET /v1 (what the
// banner's API base URL answers, server/api_index.cpp).
#include <gtest/gtest.h>

#include <string>

#include <nlohmann/json.hpp>

#include "server/request_log.h"
#include "server/web_assets.h"
#include "server_fixture.h"
#include "test_util.h"

namespace ft {
namespace {

using testing::TestServer;
using testing::TestServerConfig;

std::string read_web_file(const std::string& name) {
  return testing::read_file(testing::source_dir() + "/web/" + name);
}

TEST(WebUi, ServesTheBuiltInPageAndItsFiles) {
  TestServer s;
  auto c = s.client();
  auto root = c.Get("/");
  ASSERT_TRUE(root);
  EXPECT_EQ(root->status, 200);
  EXPECT_EQ(root->get_header_value("Content-Type"), "text/html; charset=utf-8");
  EXPECT_EQ(root->get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(root->body, read_web_file("index.html"));  // the bytes of web/index.html, as built
  EXPECT_NE(root->body.find("<script src=\"/app.js\">"), std::string::npos);

  auto index = c.Get("/index.html");
  ASSERT_TRUE(index);
  EXPECT_EQ(index->status, 200);
  EXPECT_EQ(index->body, root->body);

  auto js = c.Get("/app.js");
  ASSERT_TRUE(js);
  EXPECT_EQ(js->status, 200);
  EXPECT_EQ(js->get_header_value("Content-Type"), "text/javascript; charset=utf-8");
  EXPECT_EQ(js->get_header_value("Cache-Control"), "no-cache");
  EXPECT_EQ(js->body, read_web_file("app.js"));

  auto css = c.Get("/style.css");
  ASSERT_TRUE(css);
  EXPECT_EQ(css->status, 200);
  EXPECT_EQ(css->get_header_value("Content-Type"), "text/css; charset=utf-8");

  auto head = c.Head("/app.js");
  ASSERT_TRUE(head);
  EXPECT_EQ(head->status, 200);
  EXPECT_TRUE(head->body.empty());

  for (const char* path : {"/missing.js", "/web/app.js", "/app.js/", "/index.htm"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
  }
  auto post = c.Post("/", "{}", "application/json");  // a known path: its method is the error
  ASSERT_TRUE(post);
  EXPECT_EQ(post->status, 405);
  EXPECT_EQ(c.Get("/health")->status, 200);  // the API's routes are unchanged
  EXPECT_EQ(c.Get("/v1/models")->status, 200);
}

TEST(WebUi, FindWebAssetKnowsEveryFileOfWeb) {
  ASSERT_NE(server::find_web_asset("/"), nullptr);
  EXPECT_EQ(server::find_web_asset("/")->path, "/index.html");
  EXPECT_EQ(server::find_web_asset("/app.js")->body, read_web_file("app.js"));
  EXPECT_EQ(server::find_web_asset("/nope.css"), nullptr);
  EXPECT_EQ(server::find_web_asset("app.js"), nullptr);  // paths start with '/'
}

TEST(WebUi, PageIsOpenWithAnApiKeyButTheApiIsNot) {
  TestServerConfig cfg;
  cfg.api_key = "sekret";
  TestServer s(cfg);
  auto c = s.client();
  EXPECT_EQ(c.Get("/")->status, 200);
  EXPECT_EQ(c.Get("/app.js")->status, 200);
  EXPECT_EQ(c.Get("/v1/models")->status, 401);
  EXPECT_EQ(c.Get("/nope.js")->status, 404);  // an unknown path, as without a key
  EXPECT_EQ(c.Post("/", "{}", "application/json")->status, 401);
}

TEST(WebUi, NoWebuiLeavesRootUnknown) {
  TestServerConfig cfg;
  cfg.webui = false;
  TestServer s(cfg);
  auto c = s.client();
  for (const char* path : {"/", "/index.html", "/app.js"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 404) << path;
  }
  EXPECT_EQ(c.Get("/health")->status, 200);
}

TEST(WebUi, ServesAnIconAtFaviconSvgAndFaviconIco) {
  TestServer s;
  auto c = s.client();
  const std::string svg = read_web_file("favicon.svg");
  ASSERT_NE(svg.find("<svg"), std::string::npos);
  EXPECT_NE(c.Get("/")->body.find(R"(<link rel="icon" href="/favicon.svg")"), std::string::npos);
  for (const char* path : {"/favicon.svg", "/favicon.ico"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "image/svg+xml") << path;
    EXPECT_EQ(r->body, svg) << path;
    EXPECT_EQ(c.Head(path)->status, 200) << path;
    // Fetched by the browser on its own: a line at debug, not info.
    EXPECT_EQ(server::request_log_level("GET", path, 200), spdlog::level::debug) << path;
  }
  EXPECT_EQ(server::request_log_level("GET", "/favicon.png", 404), spdlog::level::info);
}

TEST(WebUi, FaviconIcoIsOpenWithAnApiKeyAndWithoutThePage) {
  TestServerConfig cfg;
  cfg.api_key = "sekret";
  cfg.webui = false;
  TestServer s(cfg);
  auto c = s.client();
  auto ico = c.Get("/favicon.ico");
  ASSERT_TRUE(ico);
  EXPECT_EQ(ico->status, 200);
  EXPECT_EQ(ico->body, read_web_file("favicon.svg"));
  EXPECT_EQ(c.Get("/favicon.svg")->status, 404);  // a file of the page, which --no-webui leaves out
  EXPECT_EQ(c.Post("/favicon.ico", "{}", "application/json")->status, 401);  // only GET and HEAD are open
}

TEST(WebUi, V1SaysWhatTheServerIs) {
  TestServer s;
  auto c = s.client();
  const std::string origin = "http://127.0.0.1:" + std::to_string(s.port());
  for (const char* path : {"/v1", "/v1/"}) {
    auto r = c.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type"), "application/json") << path;
    const auto j = nlohmann::json::parse(r->body);
    EXPECT_EQ(j["object"], "api");
    EXPECT_EQ(j["name"], "FreeToken");
    EXPECT_EQ(j["openai_base_url"], origin + "/v1");
    EXPECT_EQ(j["anthropic_base_url"], origin);
    EXPECT_EQ(j["models"], "/v1/models");
    EXPECT_EQ(j["chat_page"], "/");
    EXPECT_EQ(j["auth"], "none");
    EXPECT_NE(j["docs"].get<std::string>().find("base_url"), std::string::npos);
    auto head = c.Head(path);
    EXPECT_EQ(head->status, 200) << path;
    EXPECT_TRUE(head->body.empty()) << path;
  }
  // The host a client named is the one its URLs use (a name, or a proxy's address); a Host that is not
  // a host[:port] falls back to the server's own address.
  auto named = c.Get("/v1", httplib::Headers{{"Host", "box.lan:8080"}});
  EXPECT_EQ(nlohmann::json::parse(named->body)["openai_base_url"], "http://box.lan:8080/v1");
  auto odd = c.Get("/v1", httplib::Headers{{"Host", "a\"b/<x>"}});
  ASSERT_TRUE(odd);
  EXPECT_EQ(nlohmann::json::parse(odd->body)["anthropic_base_url"], origin);
  EXPECT_EQ(c.Post("/v1", "{}", "application/json")->status, 405);
  EXPECT_EQ(c.Get("/v1/nope")->status, 404);
}

TEST(WebUi, V1NeedsTheApiKeyAndNamesNoPageWithoutWebui) {
  TestServerConfig cfg;
  cfg.api_key = "sekret";
  cfg.webui = false;
  TestServer s(cfg);
  auto c = s.client();
  auto no_key = c.Get("/v1");
  ASSERT_TRUE(no_key);
  EXPECT_EQ(no_key->status, 401);
  const auto err = nlohmann::json::parse(no_key->body);
  EXPECT_EQ(err["error"]["code"], "invalid_api_key");
  EXPECT_NE(err["error"]["message"].get<std::string>().find("Authorization: Bearer <key>"), std::string::npos)
      << no_key->body;  // the 401 says how to send the key
  EXPECT_EQ(c.Get("/v1/", httplib::Headers{{"Authorization", "Bearer wrong"}})->status, 401);
  auto ok = c.Get("/v1/", httplib::Headers{{"Authorization", "Bearer sekret"}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200);
  const auto j = nlohmann::json::parse(ok->body);
  EXPECT_TRUE(j["chat_page"].is_null());
  EXPECT_EQ(j["auth"], "api_key");
  EXPECT_EQ(c.Get("/v1", httplib::Headers{{"x-api-key", "sekret"}})->status, 200);
}

}  // namespace
}  // namespace ft
