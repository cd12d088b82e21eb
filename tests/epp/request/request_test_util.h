#pragma once
// What the request tests share: a sink that records what it is told, and a registry of two
// scraped pods ("a" and "b") at kT0.
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "epp/datastore/pod_registry.h"
#include "epp/request/completed_request.h"

namespace llmd::epp::testing {

inline const std::chrono::steady_clock::time_point kT0 =
    std::chrono::steady_clock::time_point(std::chrono::hours(10));

struct RecordingSink : CompletionSink {
  void on_first_token(const CompletedRequest& r) override { first.push_back(r); }
  void on_completed(const CompletedRequest& d) override { completed.push_back(d); }
  void on_rejected(const std::string& model, int status) override {
    rejected.emplace_back(model, status);
  }
  std::vector<CompletedRequest> first;
  std::vector<CompletedRequest> completed;
  std::vector<std::pair<std::string, int>> rejected;
};

// Pods "a" (10.0.0.1:8000) and "b" (10.0.0.2:8000), scraped at kT0 with empty metrics.
inline void add_two_pods(PodRegistry& registry) {
  registry.set_pods({{"a", "10.0.0.1:8000", {}}, {"b", "10.0.0.2:8000", {}}});
  PodMetrics m;
  m.scraped_at = kT0;
  registry.update_metrics("a", m);
  registry.update_metrics("b", m);
}

}  // namespace llmd::epp::testing
