#include "epp/app/metrics_auth.h"

#include <spdlog/spdlog.h>

namespace llmd::epp {

using Json = nlohmann::json;

MetricsAuth::MetricsAuth(const discovery::KubeApiOptions& api, std::chrono::milliseconds cache_for)
    : api_(std::make_unique<discovery::KubeApiClient>(api)), cache_for_(cache_for) {}

MetricsAuth::~MetricsAuth() = default;

MetricsAuth::Verdict MetricsAuth::check(const std::string& authorization, const std::string& path) {
  constexpr std::string_view kBearer = "bearer ";
  std::string scheme = authorization.substr(0, kBearer.size());
  for (auto& c : scheme) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  const std::string token =
      scheme == kBearer ? discovery::trimmed(authorization.substr(kBearer.size())) : "";
  if (token.empty()) {
    return {401, "Unauthorized: /metrics needs a bearer token (--metrics-endpoint-auth)"};
  }
  const std::string key = token + '\n' + path;
  const auto now = std::chrono::steady_clock::now();
  std::lock_guard lock(mu_);
  if (auto it = cache_.find(key); it != cache_.end() && it->second.until > now) {
    return it->second.verdict;
  }
  Verdict v = review(token, path);
  if (v.status != 500) {  // API failures are retried on the next scrape
    if (cache_.size() > 1000) {
      cache_.clear();  // bounded: many distinct tokens only cost re-reviews
    }
    cache_[key] = Cached{v, now + cache_for_};
  }
  return v;
}

MetricsAuth::Verdict MetricsAuth::review(const std::string& token, const std::string& path) {
  const discovery::KubeTimeouts timeouts{std::chrono::seconds(5), std::chrono::seconds(5)};
  const Json token_review = {{"apiVersion", "authentication.k8s.io/v1"},
                             {"kind", "TokenReview"},
                             {"spec", {{"token", token}}}};
  auto authn = api_->request_json(discovery::KubeMethod::kPost,
                                  "/apis/authentication.k8s.io/v1/tokenreviews",
                                  token_review.dump(), timeouts);
  if (authn.status != 201 && authn.status != 200) {
    spdlog::warn("metrics auth: TokenReview failed: {}",
                 authn.error.empty() ? "HTTP " + std::to_string(authn.status) : authn.error);
    return {500, "Internal Server Error: the token could not be reviewed"};
  }
  const Json status = authn.body.value("status", Json::object());
  if (!status.value("authenticated", false)) {
    return {401, "Unauthorized: the API server does not accept this token"};
  }
  const Json user = status.value("user", Json::object());
  Json spec = {{"user", user.value("username", "")},
               {"nonResourceAttributes", {{"path", path}, {"verb", "get"}}}};
  for (const char* field : {"groups", "uid", "extra"}) {
    if (user.contains(field)) {
      spec[field] = user[field];
    }
  }
  const Json access_review = {
      {"apiVersion", "authorization.k8s.io/v1"}, {"kind", "SubjectAccessReview"}, {"spec", spec}};
  auto authz = api_->request_json(discovery::KubeMethod::kPost,
                                  "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                                  access_review.dump(), timeouts);
  if (authz.status != 201 && authz.status != 200) {
    spdlog::warn("metrics auth: SubjectAccessReview failed: {}",
                 authz.error.empty() ? "HTTP " + std::to_string(authz.status) : authz.error);
    return {500, "Internal Server Error: access could not be reviewed"};
  }
  if (!authz.body.value("status", Json::object()).value("allowed", false)) {
    return {403, "Forbidden: " + user.value("username", std::string("this user")) +
                     " may not get " + path};
  }
  return {200, ""};
}

}  // namespace llmd::epp
