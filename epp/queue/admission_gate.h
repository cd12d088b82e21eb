#pragma once
// The router queue in front of scheduling (spec epp.md section 5, seed 004). A request for a
// pool whose every pod is saturated (routerQueueThreshold) waits here; the queue drains, best
// key first (strict tier, then the policy), as capacity frees up: when a dispatched request
// finishes, and on every tick (fresh scraped metrics, expiry). Full queue: the worst entry is
// answered 429; waiting past timeoutMs: 503. Both with a JSON detail.
//
// Requests admitted but not yet scheduled are "in transit": the gate admits at most one per
// unsaturated pod before their dispatches show up in the pod bookkeeping, so one freed slot
// does not release the whole queue at once.
//
// Metrics: llmd_epp_router_queue_*, and with a FlowControlMetrics the Gateway API Inference
// Extension's flow-control families (requests in, their waits and outcomes under its names).
//
// Thread-safe (one mutex; under it the candidates callback only reads the registry's published
// snapshot, never its writers' lock). Callers are woken through the callback given to enter(),
// exactly once, from whichever thread drained the queue: the callback must only post.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "epp/interface/endpoint.h"
#include "epp/queue/queue_config.h"
#include "epp/queue/router_queue.h"

namespace prometheus {
class Registry;
}

namespace llmd::epp {

class FlowControlMetrics;

struct AdmissionRequest {
  std::string pool;
  int64_t strict_priority = 0;
  int64_t priority = 0;
  std::optional<double> slo_ttft_ms;
  double predicted_service_ms = 0;  // wspt only
  // For the flow-control metrics' labels only.
  std::string model;
  std::string target_model;
  int64_t body_bytes = 0;
};

struct AdmissionVerdict {
  int status = 200;    // 200 admitted, 429 evicted/rejected (queue full), 503 timed out
  std::string detail;  // JSON detail when not admitted
};

class AdmissionGate {
 public:
  using Clock = std::chrono::steady_clock;
  // Scheduling candidates of a pool (ready pods with metrics and in-flight bookkeeping).
  using Candidates = std::function<std::vector<Endpoint>(const std::string& pool)>;
  using Wake = std::function<void(AdmissionVerdict)>;

  // `gie` (may be null; outlives the gate): GIE's flow-control families, fed as requests
  // enter, wait and leave.
  AdmissionGate(Candidates candidates, prometheus::Registry* registry,
                FlowControlMetrics* gie = nullptr);
  ~AdmissionGate();

  // nullopt disables queueing (everything is admitted at once). Requests already waiting keep
  // their place; the new settings apply from the next drain.
  void configure(std::optional<RouterQueueConfig> config);
  bool enabled() const;
  bool needs_service_estimate() const;  // policy wspt
  std::chrono::milliseconds max_wait() const;

  struct Ticket {
    bool queued = false;  // false: `verdict` is final (admitted at once, or refused)
    AdmissionVerdict verdict;
    uint64_t id = 0;
  };
  Ticket enter(const AdmissionRequest& request, Wake wake, Clock::time_point now = Clock::now());
  void cancel(uint64_t id);  // the waiter gave up; no wake follows
  // Shutdown: every waiter and every later enter() is answered 503 with `detail`.
  void close(const std::string& detail);

  void on_scheduled(const std::string& pool);  // an admitted request was dispatched or refused
  // A dispatched request's prefill is done: the prefill tokens the saturation thresholds count
  // free here, long before the request finishes, so the queue drains at once, not a tick later.
  void on_first_token(const std::string& pool);
  void on_finished(const std::string& pool);  // a dispatched request finished
  void tick(Clock::time_point now = Clock::now());

  std::size_t pending() const;
  // Per pool that requests entered (or the default pool ""), while queueing is configured: the
  // share of its ready pods that are saturated (1 = every pod: requests now wait). Empty when
  // queueing is off.
  std::map<std::string, double> saturation() const;

 private:
  struct PoolQueue;
  struct Metrics;
  struct Waiter;
  using Woken = std::pair<Wake, AdmissionVerdict>;  // called after mu_ is released
  PoolQueue& pool_queue(const std::string& pool);   // mu_ held
  // Pops admissible entries of `pool` into `wakes`; mu_ held.
  void drain(const std::string& pool, std::vector<Woken>& wakes);
  void expire(PoolQueue& q, Clock::time_point now, std::vector<Woken>& wakes);  // mu_ held
  bool has_capacity(const std::string& pool, PoolQueue& q);                     // mu_ held
  // Ready pods of `pool` and how many of them are not saturated; mu_ held.
  std::pair<std::size_t, int64_t> free_pods(const std::string& pool) const;
  // A waiter leaves the queue with `outcome` (GIE's name) after waiting since its arrival.
  void left(const Waiter& w, const char* outcome, Clock::time_point now);
  void update_metrics();               // mu_ held
  void wake(const std::string& pool);  // drains `pool` if requests wait; takes mu_

  Candidates candidates_;
  std::unique_ptr<Metrics> metrics_;
  FlowControlMetrics* gie_;
  mutable std::mutex mu_;
  std::optional<RouterQueueConfig> config_;                  // guarded by mu_
  std::map<std::string, std::unique_ptr<PoolQueue>> pools_;  // guarded by mu_
  uint64_t next_id_ = 1;                                     // guarded by mu_
  std::optional<std::string> closed_;                        // guarded by mu_; set by close()
};

}  // namespace llmd::epp
