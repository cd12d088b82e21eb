#pragma once
// The Gateway API Inference Extension's (GIE v1.5.0) scrape-time families, under its names,
// types and label names, set from the pool's published state when Prometheus scrapes (as our
// own llmd_epp_pool gauges are), plus its build info:
//   inference_pool_average_kv_cache_utilization, _average_queue_size,
//     _average_running_requests, _ready_pods{name}: over the pool's ready pods
//   inference_pool_per_pod_queue_size{name, model_server_pod}: every pod of the pool
//   inference_extension_prefix_indexer_size: entries of the prefix index
//   inference_extension_flow_control_pool_saturation{inference_pool}: router queue on only
//   inference_extension_info{commit, build_ref} 1
// GIE's pool `name` of one of ours: the pods' `pool` label, and for the default pool (no label)
// --pool-name, else "default".
//
// Threading: refresh() runs on the metrics server's thread; the sources are thread-safe.
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

namespace prometheus {
class Gauge;
class Registry;
template <typename T>
class Family;
}  // namespace prometheus

namespace llmd::epp {

class AdmissionGate;
class PodRegistry;
class PrefixIndex;

// The build this binary came from (configure time: git, else "unknown").
struct BuildInfo {
  std::string commit;
  std::string build_ref;
  static BuildInfo of_this_build();
};

struct GieMetricSources {
  PodRegistry& pods;
  PrefixIndex& prefix_index;
  const AdmissionGate& gate;
  std::function<std::string(const std::string& pool)> pool_name;  // GIE's name of our pool
};

class GieMetrics {
 public:
  GieMetrics(prometheus::Registry& registry, GieMetricSources sources, const BuildInfo& build);

  void refresh();

 private:
  using GaugeFamily = prometheus::Family<prometheus::Gauge>;
  // Sets `family`{labels} and remembers the series; series of `family` not set since the
  // previous refresh() go (a pod or pool that left).
  struct Shown {
    GaugeFamily* family = nullptr;
    std::set<std::map<std::string, std::string>> previous{}, current{};
    void set(const std::map<std::string, std::string>& labels, double value);
    void end_refresh();
  };

  GieMetricSources sources_;
  Shown kv_, queue_, running_, ready_, per_pod_, saturation_;
  prometheus::Gauge* prefix_size_;
};

}  // namespace llmd::epp
