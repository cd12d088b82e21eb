#pragma once
// The EPP's own /metrics families: pool state, outlier ejections, per-pod bookkeeping,
// correction factors, model-level routing, leadership and upstream connections. Most are
// gauges computed when Prometheus scrapes (collect()), so the request path never touches them.
// The components' own families (scheduler, predictor client, gate, feedback, requests) register
// themselves.
//
// Threading: collect() runs on the metrics server's thread; the ejection counter is bumped on
// whichever thread ejects a pod. Both are safe: prometheus-cpp metrics are thread-safe.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace prometheus {
class Counter;
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace llmd::epp {

class AdmissionGate;
class EppSchedulingPort;
class PodRegistry;
class PrefixIndex;

// What collect() reads; everything outlives the EppMetrics.
struct EppMetricSources {
  PodRegistry& pods;
  PrefixIndex& prefix_index;
  const AdmissionGate& gate;
  const EppSchedulingPort& port;
  std::function<std::size_t()> idle_upstream_connections;
  std::function<bool()> serving;  // this replica leads (or there is no election)
  // Client requests read and not yet answered in full, per ingress (the gateway's: its ext_proc
  // streams open); null: that ingress is off.
  std::function<int()> proxy_requests;
  std::function<int()> ext_proc_streams;
  // Request-body bytes held now against --body-budget-bytes (both ingresses); null: not shown.
  std::function<std::size_t()> body_budget_held;
  // Other scrape-time gauges (GIE's families), set before the registry is serialised; null:
  // none.
  std::function<void()> before_collect;
  // What the ext_proc port's limits have ended since start, per limit (GrpcCounters: e.g.
  // "idle_timeout" -> connections closed); null: the port is off.
  std::function<std::vector<std::pair<std::string, uint64_t>>()> ext_proc_limit_events;
};

class EppMetrics {
 public:
  // Registers the families, and counts ejections through pods.set_ejection_listener.
  EppMetrics(prometheus::Registry& registry, EppMetricSources sources);

  // Handed to the proxy (ProxyOptions::upstream_opened / upstream_reused).
  prometheus::Counter& upstream_opened() { return *upstream_opened_; }
  prometheus::Counter& upstream_reused() { return *upstream_reused_; }

  // Sets the scrape-time gauges, then serialises the whole registry.
  std::string collect();

 private:
  prometheus::Registry& registry_;
  EppMetricSources sources_;
  prometheus::Gauge* leader_;
  prometheus::Counter* upstream_opened_;
  prometheus::Counter* upstream_reused_;
  prometheus::Gauge* ready_;
  prometheus::Gauge* kv_;
  prometheus::Gauge* queue_;
  prometheus::Gauge* prefix_blocks_;
  prometheus::Gauge* prefix_hit_;
  prometheus::Gauge* queue_length_;
  prometheus::Gauge* healthy_;
  prometheus::Gauge* ejected_;
  prometheus::Gauge* panic_;
  prometheus::Gauge* idle_upstream_;
  prometheus::Gauge* body_budget_held_;
  prometheus::Gauge* proxy_in_progress_;
  prometheus::Gauge* ext_proc_in_progress_ = nullptr;
  prometheus::Family<prometheus::Gauge>* pod_ejected_;
  prometheus::Family<prometheus::Gauge>* in_flight_;
  prometheus::Family<prometheus::Gauge>* residual_;
  prometheus::Family<prometheus::Gauge>* bound_;
  prometheus::Family<prometheus::Gauge>* step_;
  prometheus::Family<prometheus::Gauge>* routing_;
  prometheus::Family<prometheus::Counter>* ext_proc_limits_ = nullptr;
  std::map<std::string, uint64_t> ext_proc_limits_seen_;  // collect()'s thread only
};

}  // namespace llmd::epp
