#pragma once
// --metrics-endpoint-auth: /metrics answers only a caller whose bearer token the Kubernetes API
// server accepts (TokenReview) and allows to `get` the non-resource URL /metrics
// (SubjectAccessReview), as controller-runtime's authentication/authorization filter does for
// upstream's EPP (a Prometheus with a service account bound to a ClusterRole that allows it).
// Verdicts are cached for 10 s per token, so a scrape every few seconds costs the API server
// two requests per interval at most. Threads: check() runs on the metrics server's thread
// (it waits for the API server on a cache miss; only scrapes wait).
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "epp/discovery/kube_api_client.h"

namespace llmd::epp {

class MetricsAuth {
 public:
  struct Verdict {
    int status = 200;  // 200 allowed, 401 no or bad token, 403 not allowed, 500 API failure
    std::string reason;
  };
  explicit MetricsAuth(const discovery::KubeApiOptions& api,
                       std::chrono::milliseconds cache_for = std::chrono::seconds(10));
  ~MetricsAuth();
  // `authorization` is the request's Authorization header ("" when absent).
  Verdict check(const std::string& authorization, const std::string& path);

 private:
  Verdict review(const std::string& token, const std::string& path);

  std::unique_ptr<discovery::KubeApiClient> api_;
  const std::chrono::milliseconds cache_for_;
  std::mutex mu_;
  struct Cached {
    Verdict verdict;
    std::chrono::steady_clock::time_point until;
  };
  std::map<std::string, Cached> cache_;  // token + path -> verdict; guarded by mu_
};

}  // namespace llmd::epp
