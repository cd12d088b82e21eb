#pragma once
// The pool: configured pods, their latest scraped metrics, their passive health (outlier
// detection) and the EPP's exact in-flight bookkeeping.
//
// Readers (every scheduling cycle, the admission gate, metrics) take the current PoolSnapshot:
// an immutable pointer, copied under `snapshot_mu_` (held only for that copy), so a reader
// never waits for a writer and never copies a pod's entry. Writers (scraper answers, reloads
// and discovery, outlier detection, peer reports) serialize on `mu_`, update the master table
// and publish a new snapshot before releasing it; they never do I/O under it (the ejection
// listener is called after it is released). Per-request bookkeeping does not go through the
// registry: a request books on the PodLive of the Endpoint it was given (epp/datastore/
// pod_live.h), which the snapshot entries point to and which outlives the pod's removal.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "epp/datastore/outlier_detection.h"
#include "epp/datastore/pod_live.h"
#include "epp/datastore/pool_snapshot.h"
#include "epp/interface/endpoint.h"

namespace llmd::epp {

struct PodConfig {
  std::string name;
  std::string address;  // host:port
  std::map<std::string, std::string> labels;
};

class PodRegistry {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  explicit PodRegistry(std::chrono::milliseconds staleness = std::chrono::seconds(2));

  // The pool as last published. Everything below that reads the pool reads one of these.
  PoolSnapshotConstPtr snapshot() const;

  // Replaces the pod set (config reload, discovery). A pod that keeps its name and address
  // keeps its metrics and health, and its PodLive too unless its pool label changed.
  void set_pods(const std::vector<PodConfig>& pods);
  std::vector<PodConfig> pods() const;
  // Changes with every set_pods() (lock-free): the scraper re-reads pods() only then.
  uint64_t membership_version() const { return membership_version_.load(); }

  void update_metrics(const std::string& name, const PodMetrics& m);
  // Several pods' scrapes, published once (the simulator refreshes every pod per decision).
  void update_metrics(std::span<const std::pair<std::string, PodMetrics>> scrapes);
  void mark_scrape_failed(const std::string& name);
  // One scrape's outcome: the pod's metrics, or nullopt when the scrape failed (the pod is
  // then not ready until a scrape succeeds).
  struct ScrapeResult {
    std::string name;
    std::optional<PodMetrics> metrics;
  };
  // Several outcomes, published as one snapshot when any changed the pool (the scraper
  // collects the answers that arrive close together): the snapshot copies per second then do
  // not grow with the square of the pod count. Names not in the pool are ignored.
  void apply_scrapes(std::span<const ScrapeResult> results);

  // Snapshots published so far (tests: how often the pool is copied). Lock-free.
  uint64_t publishes() const { return publishes_.load(std::memory_order_relaxed); }

  // PoolSnapshot::candidates() of the current snapshot.
  std::vector<Endpoint> candidates(TimePoint now) const;
  // How many pods candidates() would return: what the EPP can route to now.
  std::size_t ready_count(TimePoint now) const;
  // Whether a pod of the pool names `model` in its scraped `model_name` labels (stale or
  // ejected pods included: the name is the pool's, whatever the pod's health now).
  bool serves_model(const std::string& model) const;
  // The PodLive of a pod of the pool (null when not in the pool): for callers that hold no
  // Endpoint of it (tests, tools); requests use their Endpoint's.
  std::shared_ptr<PodLive> live(const std::string& name) const;

  using Health = PoolHealth;
  Health health(TimePoint now) const;
  struct PodHealth {
    std::string name;
    bool ejected = false;
    int consecutive_failures = 0;
    int64_t ejections = 0;
  };
  // Takes `mu_`: failure runs are not published (metrics only, never on the data path).
  std::vector<PodHealth> pod_health(TimePoint now) const;

  void configure_outlier_detection(const OutlierDetectionOptions& options);
  // The pod label holding each pod's role (PodInfo::role(); the pipeline's endpointRoleLabel,
  // "" = no roles). Republishes every pod when it changes.
  void set_role_label(const std::string& label);
  // Told of every ejection (pod, its length, the pod's ejections so far), outside the lock.
  using EjectionListener =
      std::function<void(const std::string& pod, std::chrono::milliseconds length, int64_t n)>;
  void set_ejection_listener(EjectionListener listener);

  // A request to the pod failed (refused connection, timeout, 5xx, broken stream): after
  // enough in a row it is ejected (OutlierDetectionOptions), and a scrape that still succeeds
  // does not bring it back early (a pod whose /metrics answers while inference fails must not
  // keep receiving traffic).
  void on_pod_failure(const std::string& name, TimePoint now = std::chrono::steady_clock::now());
  // A request to the pod got an answer that is not a server error. Lock-free unless the pod
  // has a run of failures to break.
  void on_pod_success(const std::string& name);

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
                          TimePoint now);
  void set_peer_expiry(std::chrono::milliseconds expiry);

 private:
  struct State {
    PodConfig config;
    PodMetrics metrics;
    bool scraped_ok = false;
    bool ever_scraped = false;
    PodOutlierState outlier;
    std::shared_ptr<PodLive> live;
    PodInfoConstPtr info;   // config + metrics + live as published; remade when they change
    std::size_t index = 0;  // of its entry in entries_ (name order)
  };
  struct PeerReport {
    TimePoint at{};
    std::map<std::string, PodLoad> by_pod;
  };
  void remake_info(State& s);  // mu_ held
  // Applies one scrape's metrics to `s`; mu_ held. Returns whether the pool changed.
  bool scraped_locked(State& s, const PodMetrics& m);
  bool scrape_failed_locked(State& s);
  // Brings the pod's entry in entries_ up to date with `s`; mu_ held.
  void refresh_entry_locked(const State& s);
  // Swaps in a snapshot of entries_ and the options; mu_ held.
  void publish_locked();
  std::shared_ptr<const std::vector<PoolSnapshot::Peer>> align_peers_locked() const;

  const std::chrono::milliseconds staleness_;
  mutable std::mutex mu_;                    // serializes writers; readers never take it
  OutlierDetectionOptions outlier_options_;  // guarded by mu_
  std::string role_label_ = "role";          // guarded by mu_
  EjectionListener ejection_listener_;       // guarded by mu_
  std::map<std::string, State> pods_;        // guarded by mu_
  // The next snapshot's pods, kept up to date entry by entry, so a scrape publishes a copy of
  // this vector instead of walking the table. Guarded by mu_.
  std::vector<PoolSnapshot::Pod> entries_;
  std::size_t pool_count_ = 0;  // distinct pool labels in pods_; guarded by mu_
  // By pool label; never shrinks, so a pool's learning survives reloads. Guarded by mu_.
  std::map<std::string, std::shared_ptr<PoolLearning>> pools_;
  std::map<std::string, PeerReport> peers_;      // by peer; guarded by mu_
  std::chrono::milliseconds peer_expiry_{1000};  // guarded by mu_
  // The peers aligned with the published pods: remade only when peers or membership change
  // (a scrape publishes a new snapshot with the same one). Guarded by mu_.
  std::shared_ptr<const std::vector<PoolSnapshot::Peer>> aligned_peers_;

  std::atomic<uint64_t> membership_version_{0};  // written under mu_
  std::atomic<uint64_t> publishes_{0};           // written under mu_

  mutable std::mutex snapshot_mu_;  // held only to copy or swap the pointer
  // Never null. Swapped under both mutexes, so a writer (mu_ held) may read it without
  // snapshot_mu_; readers copy it under snapshot_mu_.
  PoolSnapshotConstPtr snapshot_;
};

}  // namespace llmd::epp
