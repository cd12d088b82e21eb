#pragma once
// Per-route request counters (by status code) and latency histograms. Metric children are
// created when a route is instrumented, so the request path only increments.
#include <memory>
#include <string>

#include "common/http/router.h"

namespace prometheus {
class Registry;
}

namespace llmd::metrics {

class HttpMetrics {
 public:
  // Families are named `<prefix>_http_requests_total` and `<prefix>_http_request_duration_seconds`.
  HttpMetrics(prometheus::Registry& registry, const std::string& prefix);
  ~HttpMetrics();
  http::Handler instrument(const std::string& route, http::Handler handler);
  // Shorthand: router.add(method, pattern, instrument(pattern, handler)).
  void add(http::Router& router, const std::string& method, const std::string& pattern,
           http::Handler handler);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace llmd::metrics
