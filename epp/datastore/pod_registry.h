#pragma once
// The pool: configured pods, their latest scraped metrics, their passive health (outlier
// detection) and the EPP's exact in-flight bookkeeping. Scraper threads write metrics; proxy
// threads take snapshots of candidates and update in-flight counters and health. One mutex
// guards the whole table; every critical section is a short copy or a counter update (never
// I/O; the ejection listener is called after the lock is released).
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "epp/datastore/bound_coverage.h"
#include "epp/datastore/outlier_detection.h"
#include "epp/datastore/pod_first_token_waits.h"
#include "epp/datastore/pod_residual.h"
#include "epp/datastore/pod_step_clock.h"
#include "epp/interface/endpoint.h"

namespace llmd::epp {

struct PodConfig {
  std::string name;
  std::string address;  // host:port
  std::map<std::string, std::string> labels;
};

class PodRegistry {
 public:
  explicit PodRegistry(std::chrono::milliseconds staleness = std::chrono::seconds(2));

  // Replaces the pod set (config reload). Pods that stay keep their metrics and counters.
  void set_pods(const std::vector<PodConfig>& pods);
  std::vector<PodConfig> pods() const;

  void update_metrics(const std::string& name, const PodMetrics& m);
  void mark_scrape_failed(const std::string& name);

  // Healthy pods (last scrape within the staleness bound, not ejected) as scheduling
  // candidates; in panic (healthy share below the threshold) every pod that ever answered a
  // scrape, with its latest metrics.
  std::vector<Endpoint> candidates(std::chrono::steady_clock::time_point now) const;
  // How many pods candidates() would return: what the EPP can route to now.
  std::size_t ready_count(std::chrono::steady_clock::time_point now) const;
  // Whether a pod of the pool names `model` in its scraped `model_name` labels (stale or
  // ejected pods included: the name is the pool's, whatever the pod's health now).
  bool serves_model(const std::string& model) const;

  struct Health {
    std::size_t pods = 0;     // in the pool
    std::size_t healthy = 0;  // scraped recently and not ejected
    std::size_t ejected = 0;  // by outlier detection
    bool panic = false;       // routing over every pod that ever answered a scrape
  };
  Health health(std::chrono::steady_clock::time_point now) const;
  struct PodHealth {
    std::string name;
    bool ejected = false;
    int consecutive_failures = 0;
    int64_t ejections = 0;
  };
  std::vector<PodHealth> pod_health(std::chrono::steady_clock::time_point now) const;

  void configure_outlier_detection(const OutlierDetectionOptions& options);
  // Told of every ejection (pod, its length, the pod's ejections so far), outside the lock.
  using EjectionListener =
      std::function<void(const std::string& pod, std::chrono::milliseconds length, int64_t n)>;
  void set_ejection_listener(EjectionListener listener);

  // Exact bookkeeping of requests this EPP dispatched.
  void on_dispatch(const std::string& name, int64_t input_tokens);
  void on_first_token(const std::string& name, int64_t input_tokens, int64_t max_tokens);
  void on_finished(const std::string& name, int64_t input_tokens, int64_t decode_tokens,
                   bool first_token_seen);
  // A request to the pod failed (refused connection, timeout, 5xx, broken stream): after
  // enough in a row it is ejected (OutlierDetectionOptions), and a scrape that still succeeds
  // does not bring it back early (a pod whose /metrics answers while inference fails must not
  // keep receiving traffic).
  void on_pod_failure(const std::string& name,
                      std::chrono::steady_clock::time_point now = std::chrono::steady_clock::now());
  // A request to the pod got an answer that is not a server error.
  void on_pod_success(const std::string& name);
  // Latest predicted TTFT of a pod (from a scheduling cycle); forgotten after `staleness`.
  void record_predicted_ttft(const std::string& name, double ttft_ms,
                             std::chrono::steady_clock::time_point now);
  // The same for every scored pod of a cycle under one lock (a cycle scores the whole pool).
  struct PredictedTtft {
    const std::string* name;
    double ttft_ms;
  };
  void record_predicted_ttfts(std::span<const PredictedTtft> predicted,
                              std::chrono::steady_clock::time_point now);
  // What a pod measured against what the model predicted for it: `model_ms` is the model's own
  // value (PodResidual: candidates() then carry each pod's residual factors against its pool's,
  // label `pool`, other pods) and `bound_ms` the bound the SLO check used, after the per-pod
  // correction and without the step phase (BoundCoverage: candidates() then carry their pool's
  // bound factors).
  void observe_ttft(const std::string& name, double model_ms, double bound_ms, double actual_ms,
                    std::chrono::steady_clock::time_point now);
  void observe_tpot(const std::string& name, double model_ms, double bound_ms, double actual_ms,
                    std::chrono::steady_clock::time_point now);
  // Active-active replicas (issue 32): the in-flight work other EPP replicas of the pool
  // report on the same pods. Each peer's latest snapshot replaces its previous one and is added
  // to this replica's own counts in candidates() until it is older than the expiry, so a peer
  // that stops reporting (dead, partitioned) stops counting instead of leaking load.
  struct PodLoad {
    std::string pod;
    int64_t dispatched = 0;
    int64_t prefill_tokens = 0;
    int64_t decode_tokens = 0;
  };
  std::vector<PodLoad> own_in_flight() const;  // this replica's counts, every pod
  void set_peer_in_flight(const std::string& peer, const std::vector<PodLoad>& loads,
                          std::chrono::steady_clock::time_point now);
  void set_peer_expiry(std::chrono::milliseconds expiry);
  // The pod's step clock, fed by the streams relayed from it without taking this table's lock
  // (candidates() then carry its StepTiming); null for a pod not in the pool.
  std::shared_ptr<PodStepClock> step_clock(const std::string& name) const;
  // The pod's streamed requests still waiting for their first token (candidates() then carry
  // how late the most overdue one is); null for a pod not in the pool.
  std::shared_ptr<PodFirstTokenWaits> first_token_waits(const std::string& name) const;

 private:
  struct State {
    PodConfig config;
    PodMetrics metrics;
    bool scraped_ok = false;
    bool ever_scraped = false;
    PodOutlierState outlier;
    int64_t dispatched = 0;
    int64_t prefill_tokens = 0;
    int64_t decode_tokens = 0;
    std::optional<double> predicted_ttft_ms;
    std::chrono::steady_clock::time_point predicted_at{};
    PodResidual ttft_residual, tpot_residual;
    std::shared_ptr<PodStepClock> step_clock = std::make_shared<PodStepClock>();
    std::shared_ptr<PodFirstTokenWaits> waits = std::make_shared<PodFirstTokenWaits>();
  };
  struct PoolCoverage {
    BoundCoverage ttft, tpot;
  };
  template <PodResidual State::*Residual, BoundCoverage PoolCoverage::*Coverage>
  void observe(const std::string& name, double model_ms, double bound_ms, double actual_ms,
               std::chrono::steady_clock::time_point now);
  bool fresh(const State& s, std::chrono::steady_clock::time_point now) const;
  Health health_locked(std::chrono::steady_clock::time_point now) const;
  // Whether candidates() may return `s` given the pool's health.
  bool routable(const State& s, const Health& h, std::chrono::steady_clock::time_point now) const;

  std::chrono::milliseconds staleness_;
  mutable std::mutex mu_;
  OutlierDetectionOptions outlier_options_;  // guarded by mu_
  EjectionListener ejection_listener_;       // set before traffic
  std::map<std::string, State> pods_;  // guarded by mu_
  std::map<std::string, PoolCoverage> coverage_;  // by pool label; guarded by mu_
  struct PeerSnapshot {
    std::chrono::steady_clock::time_point at{};
    std::map<std::string, PodLoad> by_pod;
  };
  std::map<std::string, PeerSnapshot> peers_;  // by peer; guarded by mu_
  std::chrono::milliseconds peer_expiry_{1000};  // guarded by mu_
};

}  // namespace llmd::epp
