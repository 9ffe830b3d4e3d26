// The request target's path and query (server/http_types.h split_target): the origin form and the
// absolute form a server must also accept (RFC 9112 section 3.2.2).
#include <gtest/gtest.h>

#include "server/http_types.h"

namespace ft::server {
namespace {

HttpRequest split(const std::string& target) {
  HttpRequest r;
  r.target = target;
  split_target(r);
  return r;
}

TEST(HttpTarget, OriginFormPathAndQuery) {
  const HttpRequest r = split("/v1/models?a=1&b=x%20y&c");
  EXPECT_EQ(r.path, "/v1/models");
  ASSERT_EQ(r.params.size(), 3u);
  EXPECT_EQ(r.params.find("b")->second, "x y");
  EXPECT_EQ(r.params.find("c")->second, "");
}

TEST(HttpTarget, AbsoluteFormGivesTheSamePathAndQuery) {
  EXPECT_EQ(split("http://127.0.0.1:1919/v1/models").path, "/v1/models");
  EXPECT_EQ(split("HTTPS://example.com/health").path, "/health");
  EXPECT_EQ(split("http://host").path, "/");
  const HttpRequest q = split("http://host?x=1");
  EXPECT_EQ(q.path, "/");
  ASSERT_EQ(q.params.size(), 1u);
  EXPECT_EQ(q.params.find("x")->second, "1");
  const HttpRequest p = split("http://host:80/v1/models/a%2Fb?y=2");
  EXPECT_EQ(p.path, "/v1/models/a/b");
  EXPECT_EQ(p.params.find("y")->second, "2");
  // Not a scheme: a path that merely mentions one stays as it is.
  EXPECT_EQ(split("/http://x").path, "/http://x");
}

}  // namespace
}  // namespace ft::server
