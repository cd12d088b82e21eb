#include "common/http/router.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace llmd::http {
namespace {

Request make_request(std::string method, std::string target) {
  Request r;
  r.method = std::move(method);
  r.target = std::move(target);
  const auto q = r.target.find('?');
  r.path = r.target.substr(0, q);
  r.query = q == std::string::npos ? "" : r.target.substr(q + 1);
  return r;
}

Handler tag(std::string name) {
  return [name](Request& r) {
    nlohmann::json j{{"route", name}};
    for (const auto& [k, v] : r.path_params) {
      j["params"][k] = v;
    }
    return Response::json(200, j);
  };
}

nlohmann::json route_json(const Router& router, std::string method, std::string target) {
  auto req = make_request(std::move(method), std::move(target));
  return nlohmann::json::parse(router.route(req).body);
}

TEST(HttpRouter, LiteralBeatsParamWhenParamRegisteredFirst) {
  Router router;
  router.add("GET", "/model/{name}/info", tag("param"));
  router.add("GET", "/model/download/info", tag("literal"));
  EXPECT_EQ(route_json(router, "GET", "/model/download/info")["route"], "literal");
  EXPECT_EQ(route_json(router, "GET", "/model/ttft/info")["route"], "param");
}

TEST(HttpRouter, LiteralBeatsParamWhenLiteralRegisteredFirst) {
  Router router;
  router.add("GET", "/model/download/info", tag("literal"));
  router.add("GET", "/model/{name}/info", tag("param"));
  EXPECT_EQ(route_json(router, "GET", "/model/download/info")["route"], "literal");
  EXPECT_EQ(route_json(router, "GET", "/model/tpot/info")["route"], "param");
}

TEST(HttpRouter, ExtractsParamsInPatternOrderAndIgnoresQuery) {
  Router router;
  router.add("GET", "/a/{x}/b/{y}", [](Request& r) {
    EXPECT_EQ(r.param("x"), "1");
    EXPECT_EQ(r.param("y"), "two");
    EXPECT_EQ(r.param("z"), "");
    EXPECT_EQ(r.path_params.size(), 2u);
    EXPECT_EQ(r.path_params[0].first, "x");
    return Response::text(204, "");
  });
  auto req = make_request("GET", "/a/1/b/two?z=3");
  EXPECT_EQ(router.route(req).status, 204);
}

TEST(HttpRouter, UnknownPathIs404WithDetail) {
  Router router;
  router.add("GET", "/health", tag("health"));
  for (const char* target : {"/nope", "/health/extra", "/health/", "/"}) {
    auto req = make_request("GET", target);
    const auto res = router.route(req);
    EXPECT_EQ(res.status, 404) << target;
    EXPECT_EQ(res.content_type, "application/json");
    EXPECT_EQ(nlohmann::json::parse(res.body), (nlohmann::json{{"detail", "Not Found"}}));
  }
}

TEST(HttpRouter, KnownPathOtherMethodIs405WithDetail) {
  Router router;
  router.add("POST", "/predict", tag("predict"));
  router.add("PUT", "/predict", tag("predict-put"));
  auto req = make_request("GET", "/predict");
  const auto res = router.route(req);
  EXPECT_EQ(res.status, 405);
  EXPECT_EQ(nlohmann::json::parse(res.body), (nlohmann::json{{"detail", "Method Not Allowed"}}));
  EXPECT_EQ(route_json(router, "POST", "/predict")["route"], "predict");
}

TEST(HttpRouter, EmptyParamSegmentDoesNotMatch) {
  Router router;
  router.add("GET", "/model/{name}", tag("param"));
  auto req = make_request("GET", "/model/");
  EXPECT_EQ(router.route(req).status, 404);
}

TEST(HttpMessage, HeaderLookupIsCaseInsensitive) {
  Request r;
  r.headers.push_back({"content-type", "application/json"});
  EXPECT_EQ(r.header("Content-Type"), "application/json");
  EXPECT_EQ(r.header("CONTENT-TYPE"), "application/json");
  EXPECT_EQ(r.header("x-missing"), "");
}

TEST(HttpMessage, ResponseHelpers) {
  const auto j = Response::json(201, nlohmann::json{{"a", 1}});
  EXPECT_EQ(j.status, 201);
  EXPECT_EQ(j.body, R"({"a":1})");
  EXPECT_EQ(j.content_type, "application/json");

  const auto d = Response::detail(422, "bad \"input\"");
  EXPECT_EQ(d.status, 422);
  EXPECT_EQ(nlohmann::json::parse(d.body)["detail"], "bad \"input\"");

  const auto t = Response::text(200, "ok", "text/plain; version=0.0.4");
  EXPECT_EQ(t.body, "ok");
  EXPECT_EQ(t.content_type, "text/plain; version=0.0.4");
}

TEST(HttpMessage, PercentDecodeHandlesSdkEncodingAndRejectsMalformedEscapes) {
  EXPECT_EQ(percent_decode("meta-llama%2FLlama-3.1-8B-Instruct"),
            "meta-llama/Llama-3.1-8B-Instruct");
  EXPECT_EQ(percent_decode("a%2fb%20c+d"), "a/b c+d");
  EXPECT_EQ(percent_decode("plain"), "plain");
  EXPECT_EQ(percent_decode("%E2%82%AC"), "\xE2\x82\xAC");
  for (const char* bad : {"%", "%2", "a%zz", "%G1", "x%00y"}) {
    EXPECT_EQ(percent_decode(bad), std::nullopt) << bad;
  }
}

TEST(HttpRouter, PathParamsArePercentDecoded) {
  Router router;
  router.add("GET", "/model/{name}/info", tag("info"));
  EXPECT_EQ(route_json(router, "GET", "/model/ttft%2Fx/info")["params"]["name"], "ttft/x");
  // A segment that does not decode is handed over as sent; the handler decides.
  EXPECT_EQ(route_json(router, "GET", "/model/a%zz/info")["params"]["name"], "a%zz");
}

TEST(HttpMessage, BearerSchemeIsCaseInsensitiveTokenIsNot) {
  auto with = [](std::string value) {
    Request r;
    r.headers.push_back({"authorization", std::move(value)});
    return r;
  };
  EXPECT_EQ(require_bearer("s3cret", with("Bearer s3cret")), std::nullopt);
  EXPECT_EQ(require_bearer("s3cret", with("bearer s3cret")), std::nullopt);
  EXPECT_EQ(require_bearer("s3cret", with("BEARER s3cret")), std::nullopt);
  for (const char* bad : {"Bearer S3CRET", "Bearer s3cre", "Bearer s3cretx", "Basic s3cret",
                          "s3cret", "Bearers3cret", ""}) {
    auto refused = require_bearer("s3cret", with(bad));
    ASSERT_TRUE(refused.has_value()) << bad;
    EXPECT_EQ(refused->status, 401) << bad;
  }
  EXPECT_EQ(require_bearer("", with("")), std::nullopt);
}

}  // namespace
}  // namespace llmd::http
