// The transport-free parts of the HTTP front end: the Router's answers before the model is loaded, CORS,
// the error shape with Retry-After, and generation_config.json defaults.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "server/generation_config.h"
#include "server/routes.h"

namespace kvik::server {
namespace {

std::string header(const HttpReply& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

HttpRequest request(std::string method, std::string target, std::string origin = "") {
  HttpRequest r;
  r.method = std::move(method);
  r.target = std::move(target);
  r.origin = std::move(origin);
  return r;
}

TEST(Router, AnswersHealthAndGenerationWith503AndRetryAfterWhileLoading) {
  ServerConfig cfg;
  Router router(cfg);
  for (const auto& [method, path] : {std::pair{"GET", "/health"}, {"POST", "/v1/completions"}, {"GET", "/v1/models"}}) {
    HttpReply r = router.handle(request(method, path), nullptr);
    EXPECT_EQ(r.status, 503) << path;
    EXPECT_EQ(header(r, "Retry-After"), "1") << path;
    auto body = nlohmann::json::parse(r.body);
    EXPECT_EQ(body["error"]["code"], 503);
    EXPECT_EQ(r.stream, nullptr);
  }
  HttpReply unknown = router.handle(request("GET", "/v1/nothing?x=1"), nullptr);
  EXPECT_EQ(unknown.status, 404);
  EXPECT_NE(unknown.body.find("no route for GET /v1/nothing"), std::string::npos);
}

TEST(Router, TheRouteTableMatchesMethodPathAndArgumentAndAsksForTheKeyFirst) {
  ServerConfig cfg;
  cfg.api_key = "k";
  Router router(cfg);
  HttpRequest with_key = request("DELETE", "/v1/responses/resp_1");
  with_key.authorization = "Bearer k";
  EXPECT_EQ(router.handle(with_key, nullptr).status, 503);  // matched, authorized, model still loading
  EXPECT_EQ(router.handle(request("POST", "/v1/responses"), nullptr).status, 401);
  EXPECT_EQ(router.handle(request("GET", "/v1/responses/resp_1"), nullptr).status, 401);
  for (const auto& [method, path] : {std::pair{"GET", "/v1/responses/a/b"},
                                     {"GET", "/v1/responses/"},
                                     {"PUT", "/v1/responses/resp_1"},
                                     {"POST", "/v1/models"}}) {
    HttpReply r = router.handle(request(method, path), nullptr);
    EXPECT_EQ(r.status, 404) << method << " " << path;
    EXPECT_NE(r.body.find(std::string("no route for ") + method), std::string::npos) << r.body;
  }
  EXPECT_EQ(router.handle(request("HEAD", "/health"), nullptr).status, 503);       // GET routes answer HEAD; no key
  EXPECT_EQ(router.handle(request("GET", "/web/kvik.css"), nullptr).status, 200);  // pages need neither
}

TEST(Router, ErrorShapeAndRetryAfterOnlyWhereARetryHelps) {
  HttpReply r = Router::error({429, "busy", "", ""});
  EXPECT_EQ(r.status, 429);
  EXPECT_EQ(header(r, "Retry-After"), "1");
  EXPECT_EQ(nlohmann::json::parse(r.body)["error"]["type"], "RateLimitError");
  HttpReply bad = Router::error(ApiError::bad_request("no", "temperature"));
  EXPECT_EQ(header(bad, "Retry-After"), "");
  EXPECT_EQ(nlohmann::json::parse(bad.body)["error"]["param"], "temperature");
}

TEST(Router, CorsAnyOriginListedOriginsAndPreflight) {
  ServerConfig any;  // default: '*'
  Router a(any);
  HttpReply r = a.handle(request("GET", "/health", "https://app.example"), nullptr);
  EXPECT_EQ(header(r, "Access-Control-Allow-Origin"), "*");
  HttpReply none = a.handle(request("GET", "/health"), nullptr);
  EXPECT_EQ(header(none, "Access-Control-Allow-Origin"), "");  // not a browser request

  ServerConfig listed;
  listed.allowed_origins = {"https://ok.example"};
  Router l(listed);
  HttpRequest pre = request("OPTIONS", "/v1/chat/completions", "https://ok.example");
  pre.access_control_request_headers = "authorization, content-type";
  HttpReply p = l.handle(pre, nullptr);
  EXPECT_EQ(p.status, 204);
  EXPECT_EQ(header(p, "Access-Control-Allow-Origin"), "https://ok.example");
  EXPECT_EQ(header(p, "Access-Control-Allow-Headers"), "authorization, content-type");
  EXPECT_NE(header(p, "Access-Control-Allow-Methods").find("POST"), std::string::npos);
  HttpReply other = l.handle(request("GET", "/health", "https://evil.example"), nullptr);
  EXPECT_EQ(header(other, "Access-Control-Allow-Origin"), "");

  ServerConfig off;
  off.allowed_origins = {""};
  Router o(off);
  EXPECT_EQ(header(o.handle(request("GET", "/health", "https://app.example"), nullptr), "Access-Control-Allow-Origin"),
            "");
}

TEST(GenerationConfig, SamplingDefaultsAsVllmAppliesThem) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("kvik-gencfg-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "generation_config.json")
      << R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "max_new_tokens": 77, "bos_token_id": 1, "do_sample": true})";
  nlohmann::json d = load_generation_defaults("auto", dir.string());
  EXPECT_EQ(d, nlohmann::json::parse(R"({"temperature": 0.6, "top_p": 0.9, "top_k": 20, "max_tokens": 77})"));
  EXPECT_EQ(load_generation_defaults("vllm", dir.string()), nlohmann::json::object());
  EXPECT_EQ(load_generation_defaults(dir.string(), "model.gguf"), d);  // a folder named explicitly
  EXPECT_EQ(load_generation_defaults("auto", (dir / "generation_config.json").string()), nlohmann::json::object());
  EXPECT_THROW(load_generation_defaults((dir / "missing.json").string(), "m"), Error);
  std::ofstream(dir / "bad.json") << "{not json";
  EXPECT_THROW(load_generation_defaults((dir / "bad.json").string(), "m"), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace kvik::server
