// The chat page's routes (server/webui.cpp): GET / and the files of web/, built into the binary, with
// their Content-Type and Cache-Control: no-cache, open without the API key (API routes still need it);
// an unknown file is 404, and with --no-webui (ServerOptions::webui = false) / is 404 as well.
#include <gtest/gtest.h>

#include <string>

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

}  // namespace
}  // namespace ft
