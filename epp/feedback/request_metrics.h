#pragma once
// Prometheus metrics of completed requests (epp.md section 4): actual vs predicted TTFT/TPOT,
// SLO thresholds and violations, requests by code. Labels model_name (requested model) and
// target_model_name (model actually served, the same unless a routing rule rewrote it).
#include <functional>
#include <map>
#include <set>
#include <memory>
#include <mutex>
#include <string>

#include "epp/proxy/proxy_types.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp {

class RequestMetrics : public CompletionSink {
 public:
  explicit RequestMetrics(prometheus::Registry& registry);
  ~RequestMetrics() override;
  void on_completed(const CompletedRequest& done) override;
  // Requests answered without dispatch (shed, no pods, bad request, every pod failed).
  void on_rejected(const std::string& model, int status) override;
  // Names the pool serves (the pods' scraped `model_name` labels): such a name labels its own
  // series from the first request, even a 429/503 before any pod answered it. Set once at
  // start-up, before requests; called under this object's lock, so it must not call back.
  using PoolServes = std::function<bool(const std::string& model)>;
  void set_pool_serves(PoolServes pool_serves) { pool_serves_ = std::move(pool_serves); }

 private:
  struct Families;
  struct Children;
  Children& children(const std::string& model, const std::string& target_model);
  std::unique_ptr<Families> families_;
  std::mutex mu_;
  // (model_name, target_model_name) -> children; guarded by mu_
  std::map<std::pair<std::string, std::string>, std::unique_ptr<Children>> by_model_;
  PoolServes pool_serves_;  // null: only names a pod answered successfully
  // Model names that label their own series: those a pod has answered successfully or the
  // pool serves (pool_serves_), at most kMaxModelLabels. Any other name (a typo, a scan of 10,000 names) is counted as "other",
  // so clients cannot grow /metrics without bound. Guarded by mu_.
  std::set<std::string> served_models_;
  const std::string& label(const std::string& model, bool served);

 public:
  static constexpr std::size_t kMaxModelLabels = 256;
  static inline const std::string kOtherModel = "other";
};

// Fans one completion out to several sinks (feedback, metrics, ...).
class CompletionFanout : public CompletionSink {
 public:
  void add(CompletionSink& sink) { sinks_.push_back(&sink); }
  void on_first_token(const CompletedRequest& req) override {
    for (auto* s : sinks_) {
      s->on_first_token(req);
    }
  }
  void on_completed(const CompletedRequest& done) override {
    for (auto* s : sinks_) {
      s->on_completed(done);
    }
  }
  void on_rejected(const std::string& model, int status) override {
    for (auto* s : sinks_) {
      s->on_rejected(model, status);
    }
  }

 private:
  std::vector<CompletionSink*> sinks_;
};

}  // namespace llmd::epp
