#pragma once
// The model_name / target_model_name label values of the request metrics (ours and the Gateway
// API Inference Extension's), bounded so that clients cannot grow /metrics: a name labels its
// own series once a pod answered it successfully or the pool serves it (the pods' scraped
// `model_name` labels), at most kMax names; any other name (a typo, a scan of 10,000 names) is
// counted as "other". Names only join, never leave: a name that labelled a series keeps it.
//
// Thread-safe (one mutex); shared by every metric sink so that they all label alike.
#include <cstddef>
#include <functional>
#include <mutex>
#include <set>
#include <string>

namespace llmd::epp {

class ModelLabels {
 public:
  static constexpr std::size_t kMax = 256;
  static inline const std::string kOther = "other";

  // Names the pool serves. Set once at start-up, before requests; called under this object's
  // lock, so it must not call back.
  using PoolServes = std::function<bool(const std::string& model)>;
  void set_pool_serves(PoolServes pool_serves);

  // The label of `model`; `served`: a pod has just answered it successfully.
  std::string label(const std::string& model, bool served);

 private:
  std::mutex mu_;
  std::set<std::string> names_;  // guarded by mu_
  PoolServes pool_serves_;       // guarded by mu_; null: only names a pod answered
};

}  // namespace llmd::epp
