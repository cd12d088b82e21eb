#pragma once
// Shared helpers for the EPP scheduling-core tests: a scripted Rng, endpoint builders, a fake
// PredictionSource and a Handle over a private PrefixIndex.
#include <chrono>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "epp/datastore/prefix_index.h"
#include "epp/interface/prediction_source.h"
#include "epp/interface/rng.h"
#include "epp/scheduler/handle.h"

namespace llmd::epp::testing {

// Returns the scripted values in order, then `fallback` forever.
class FixedRng final : public Rng {
 public:
  explicit FixedRng(std::deque<double> values = {}, double fallback = 0.5)
      : Rng(0), values_(std::move(values)), fallback_(fallback) {}
  double uniform() override {
    ++draws;
    if (values_.empty()) {
      return fallback_;
    }
    double v = values_.front();
    values_.pop_front();
    return v;
  }
  int draws = 0;

 private:
  std::deque<double> values_;
  double fallback_;
};

inline Endpoint pod(std::string name, double kv = 0.5, int64_t waiting = 0) {
  PodInfo info;
  info.address = "10.0.0." + std::to_string(name.size()) + ":8000";
  info.name = std::move(name);
  info.metrics.kv_cache_usage = kv;
  info.metrics.waiting = waiting;
  return Endpoint::of(std::move(info));
}

// `e` over a copy of its PodInfo changed by `change` (a published PodInfo is never mutated).
template <class Change>
Endpoint with_info(Endpoint e, Change change) {
  PodInfo info = *e.info;
  change(info);
  e.info = std::make_shared<const PodInfo>(std::move(info));
  return e;
}

// A pod with a prediction whose headrooms are given directly (as the producer would write).
inline Endpoint predicted(std::string name, double ttft_h, double tpot_h, int64_t dispatched) {
  Endpoint e = pod(std::move(name));
  e.dispatched = dispatched;
  LatencyPredictionInfo l;
  l.ttft_headroom_ms = ttft_h;
  l.tpot_headroom_ms = tpot_h;
  l.predicted_ttft_ms = -ttft_h;  // as if SLO = 0; only used by the affinity penalty tests
  l.ttft_valid = ttft_h >= 0;
  l.tpot_valid = tpot_h >= 0;
  e.latency = l;
  return e;
}

inline Endpoint with_prefix(Endpoint e, std::size_t matched, std::size_t total) {
  e.prefix = PrefixCacheMatchInfo{matched, total};
  return e;
}

class FakePredictionSource final : public PredictionSource {
 public:
  std::optional<std::vector<Prediction>> predict(
      const std::vector<features::FeatureInput>& rows,
      std::chrono::steady_clock::time_point deadline) override {
    last_rows = rows;
    last_deadline = deadline;
    ++calls;
    if (fail) {
      return std::nullopt;
    }
    std::vector<Prediction> out;
    for (std::size_t i = 0; i < rows.size(); ++i) {
      out.push_back(i < answers.size() ? answers[i] : Prediction{100, 10});
    }
    return out;
  }
  std::vector<Prediction> answers;
  bool fail = false;
  int calls = 0;
  std::vector<features::FeatureInput> last_rows;
  std::chrono::steady_clock::time_point last_deadline{};
};

inline const std::chrono::steady_clock::time_point kNow =
    std::chrono::steady_clock::time_point(std::chrono::seconds(1000));

// A Handle with an injected environment and a fixed clock.
struct TestServices {
  PrefixIndex index;
  FakePredictionSource source;
  std::map<std::string, std::string> env;
  Handle handle() {
    return Handle{index, &source,
                  [this](std::string_view k) -> std::optional<std::string> {
                    auto it = env.find(std::string(k));
                    return it == env.end() ? std::nullopt : std::optional(it->second);
                  },
                  [] { return kNow; }};
  }
};

inline SchedulingRequest request(std::string prompt = "hello world", std::string model = "m") {
  SchedulingRequest r;
  r.request_id = "req-1";
  r.model = std::move(model);
  r.prompt_text = std::move(prompt);
  r.input_tokens = 2;
  return r;
}

}  // namespace llmd::epp::testing
