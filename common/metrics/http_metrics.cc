#include "common/metrics/http_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include <chrono>
#include <array>
#include <atomic>
#include <mutex>

namespace llmd::metrics {

struct HttpMetrics::Impl {
  prometheus::Family<prometheus::Counter>* requests = nullptr;
  prometheus::Family<prometheus::Histogram>* duration = nullptr;
};

HttpMetrics::HttpMetrics(prometheus::Registry& registry, const std::string& prefix)
    : impl_(std::make_shared<Impl>()) {
  impl_->requests = &prometheus::BuildCounter()
                         .Name(prefix + "_http_requests_total")
                         .Help("HTTP requests by route and status code")
                         .Register(registry);
  impl_->duration = &prometheus::BuildHistogram()
                         .Name(prefix + "_http_request_duration_seconds")
                         .Help("Handler time per route (excludes network and queueing)")
                         .Register(registry);
}

HttpMetrics::~HttpMetrics() = default;

namespace {

// Counters by status code for one route, created on first use so that /metrics lists only codes
// that happened. The fast path is one atomic load; creation takes the family's own lock once.
class CodeCounters {
 public:
  CodeCounters(prometheus::Family<prometheus::Counter>& family, std::string route)
      : family_(family), route_(std::move(route)) {}
  void increment(int code) {
    if (code < 100 || code > 599) {
      code = 599;
    }
    auto& slot = slots_[static_cast<std::size_t>(code - 100)];
    prometheus::Counter* c = slot.load(std::memory_order_acquire);
    if (c == nullptr) {
      std::lock_guard lock(mu_);
      c = slot.load(std::memory_order_relaxed);
      if (c == nullptr) {
        c = &family_.Add({{"route", route_}, {"code", std::to_string(code)}});
        slot.store(c, std::memory_order_release);
      }
    }
    c->Increment();
  }

 private:
  prometheus::Family<prometheus::Counter>& family_;
  std::string route_;
  std::mutex mu_;
  std::array<std::atomic<prometheus::Counter*>, 500> slots_{};
};

}  // namespace

http::Handler HttpMetrics::instrument(const std::string& route, http::Handler handler) {
  auto codes = std::make_shared<CodeCounters>(*impl_->requests, route);
  prometheus::Histogram* hist = &impl_->duration->Add(
      {{"route", route}},
      prometheus::Histogram::BucketBoundaries{0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025,
                                              0.005, 0.01, 0.025, 0.1, 0.5, 2.5});
  return [codes, hist, handler = std::move(handler)](http::Request& req) {
    auto start = std::chrono::steady_clock::now();
    http::Response resp = handler(req);
    hist->Observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    codes->increment(resp.status);
    return resp;
  };
}

void HttpMetrics::add(http::Router& router, const std::string& method, const std::string& pattern,
                      http::Handler handler) {
  router.add(method, pattern, instrument(pattern, std::move(handler)));
}

}  // namespace llmd::metrics
