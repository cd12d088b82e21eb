#include "epp/app/epp_metrics.h"

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <chrono>

#include "common/metrics/exposition.h"
#include "epp/datastore/pod_registry.h"
#include "epp/datastore/prefix_index.h"
#include "epp/queue/admission_gate.h"
#include "epp/request/epp_scheduling_port.h"

namespace llmd::epp {

using prometheus::BuildCounter;
using prometheus::BuildGauge;

EppMetrics::EppMetrics(prometheus::Registry& registry, EppMetricSources sources)
    : registry_(registry), sources_(std::move(sources)) {
  leader_ = &BuildGauge()
                 .Name("llmd_epp_leader")
                 .Help(
                     "1 while this EPP replica serves: the leader of --leader-elect, or always "
                     "without it; 0 while it stands by")
                 .Register(registry)
                 .Add({});
  auto& upstream = BuildCounter()
                       .Name("llmd_epp_upstream_connections_total")
                       .Help(
                           "Connections to pods for proxied requests: opened, or kept-alive "
                           "ones reused")
                       .Register(registry);
  upstream_opened_ = &upstream.Add({{"connection", "opened"}});
  upstream_reused_ = &upstream.Add({{"connection", "reused"}});
  auto& pool = BuildGauge()
                   .Name("llmd_epp_pool")
                   .Help(
                       "Pool state: ready pods, average KV usage and queue of ready pods, "
                       "prefix index size, request-body bytes held against the body budget "
                       "(proxy and gateway together)")
                   .Register(registry);
  ready_ = &pool.Add({{"stat", "ready_pods"}});
  kv_ = &pool.Add({{"stat", "avg_kv_cache_usage"}});
  queue_ = &pool.Add({{"stat", "avg_waiting"}});
  prefix_blocks_ = &pool.Add({{"stat", "prefix_index_blocks"}});
  prefix_hit_ = &pool.Add({{"stat", "prefix_index_hit_ratio"}});
  queue_length_ = &pool.Add({{"stat", "router_queue_length"}});
  healthy_ = &pool.Add({{"stat", "healthy_pods"}});
  ejected_ = &pool.Add({{"stat", "ejected_pods"}});
  panic_ = &pool.Add({{"stat", "panic_mode"}});
  idle_upstream_ = &pool.Add({{"stat", "idle_upstream_connections"}});
  body_budget_held_ = &pool.Add({{"stat", "body_budget_held_bytes"}});
  auto& in_progress =
      BuildGauge()
          .Name("llmd_epp_requests_in_progress")
          .Help(
              "Client requests the EPP has read and not yet answered in full, by ingress: "
              "proxy (its OpenAI port) or ext_proc (the gateway's streams open), as Envoy's "
              "downstream_rq_active; a drain ends when both are 0")
          .Register(registry);
  proxy_in_progress_ = &in_progress.Add({{"ingress", "proxy"}});
  if (sources_.ext_proc_streams) {
    ext_proc_in_progress_ = &in_progress.Add({{"ingress", "ext_proc"}});
  }
  if (sources_.ext_proc_limit_events) {
    ext_proc_limits_ = &BuildCounter()
                            .Name("llmd_epp_ext_proc_limit_events_total")
                            .Help(
                                "What the ext_proc port's per-peer limits ended: connections "
                                "closed (handshake_timeout, idle_timeout, max_connection_age, "
                                "keepalive_timeout), "
                                "streams reset (stream_idle_timeout, max_header_list_bytes), "
                                "messages refused (message_budget)")
                            .Register(registry);
  }
  auto& ejections = BuildCounter()
                        .Name("llmd_epp_pod_ejections_total")
                        .Help("Outlier ejections of a pod after consecutive failed requests")
                        .Register(registry);
  pod_ejected_ = &BuildGauge()
                      .Name("llmd_epp_pod_ejected")
                      .Help("1 while outlier detection keeps this pod out of the candidates")
                      .Register(registry);
  sources_.pods.set_ejection_listener(
      [&ejections](const std::string& pod, std::chrono::milliseconds, int64_t) {
        ejections.Add({{"pod", pod}}).Increment();
      });
  in_flight_ = &BuildGauge()
                    .Name("llmd_epp_pod_in_flight")
                    .Help(
                        "Requests this EPP dispatched to a ready pod that have not finished "
                        "(its exact bookkeeping)")
                    .Register(registry);
  residual_ = &BuildGauge()
                   .Name("llmd_epp_pod_latency_residual_factor")
                   .Help(
                       "What this pod's predicted TTFT / TPOT is multiplied by: how much "
                       "slower (> 1) or faster than its pool's other pods it has been against "
                       "the model (1 = no significant difference; applied with "
                       "podResidualCorrection)")
                   .Register(registry);
  bound_ = &BuildGauge()
                .Name("llmd_epp_pool_latency_bound_factor")
                .Help(
                    "What the pool's predicted TTFT / TPOT bounds would have had to be "
                    "multiplied by to hold for 9 of its latest requests in 10 (1 = not enough "
                    "requests yet; SLO checks use it with sloBoundCalibration)")
                .Register(registry);
  step_ = &BuildGauge()
               .Name("llmd_epp_pod_step_milliseconds")
               .Help(
                   "Typical duration of this pod's forward passes, from the gaps between the "
                   "tokens of the streams this EPP relays (0 = not measured yet; the step "
                   "phase of stepPhaseCorrection)")
               .Register(registry);
  routing_ = &BuildGauge()
                  .Name("llmd_epp_latency_routing_target")
                  .Help(
                      "Model-level latency routing per rule and target: rolling average "
                      "response time (ms), samples in the window, fast (1 = receives traffic)")
                  .Register(registry);
}

std::string EppMetrics::collect() {
  const auto now = std::chrono::steady_clock::now();
  PodRegistry& pods = sources_.pods;
  const auto candidates = pods.candidates(now);
  const PodRegistry::Health health = pods.health(now);
  healthy_->Set(static_cast<double>(health.healthy));
  ejected_->Set(static_cast<double>(health.ejected));
  panic_->Set(health.panic ? 1 : 0);
  idle_upstream_->Set(static_cast<double>(sources_.idle_upstream_connections()));
  body_budget_held_->Set(
      sources_.body_budget_held ? static_cast<double>(sources_.body_budget_held()) : 0);
  proxy_in_progress_->Set(sources_.proxy_requests ? sources_.proxy_requests() : 0);
  if (ext_proc_in_progress_ != nullptr) {
    ext_proc_in_progress_->Set(sources_.ext_proc_streams());
  }
  if (ext_proc_limits_ != nullptr) {
    // The server counts in atomics; the counter follows them by the difference since the last
    // scrape.
    for (const auto& [limit, total] : sources_.ext_proc_limit_events()) {
      uint64_t& seen = ext_proc_limits_seen_[limit];
      ext_proc_limits_->Add({{"limit", limit}}).Increment(static_cast<double>(total - seen));
      seen = total;
    }
  }
  for (const auto& p : pods.pod_health(now)) {
    pod_ejected_->Add({{"pod", p.name}}).Set(p.ejected ? 1 : 0);
  }
  double kv = 0;
  double waiting = 0;
  for (const auto& e : candidates) {
    kv += e.metrics().kv_cache_usage;
    waiting += static_cast<double>(e.metrics().waiting);
    in_flight_->Add({{"pod", e.name()}}).Set(static_cast<double>(e.dispatched));
    residual_->Add({{"pod", e.name()}, {"latency", "ttft"}}).Set(e.ttft_residual_factor);
    residual_->Add({{"pod", e.name()}, {"latency", "tpot"}}).Set(e.tpot_residual_factor);
    step_->Add({{"pod", e.name()}}).Set(e.step ? e.step->step_ms : 0.0);
    bound_->Add({{"pool", e.pool()}, {"latency", "ttft"}}).Set(e.ttft_bound_factor);
    bound_->Add({{"pool", e.pool()}, {"latency", "tpot"}}).Set(e.tpot_bound_factor);
  }
  const auto n = static_cast<double>(candidates.size());
  ready_->Set(n);
  kv_->Set(candidates.empty() ? 0 : kv / n);
  queue_->Set(candidates.empty() ? 0 : waiting / n);
  const auto st = sources_.prefix_index.stats();
  prefix_blocks_->Set(static_cast<double>(st.blocks));
  prefix_hit_->Set(st.queried_blocks == 0 ? 0
                                          : static_cast<double>(st.matched_blocks) /
                                                static_cast<double>(st.queried_blocks));
  queue_length_->Set(static_cast<double>(sources_.gate.pending()));
  leader_->Set(sources_.serving() ? 1 : 0);
  if (auto router = sources_.port.latency_router()) {
    for (const auto& t : router->status(std::chrono::steady_clock::now())) {
      auto set = [&](const char* stat, double v) {
        routing_->Add({{"rule", t.rule_id}, {"target", t.target}, {"stat", stat}}).Set(v);
      };
      set("avg_response_ms", t.average_ms);
      set("samples", static_cast<double>(t.samples));
      set("fast", t.fast ? 1 : 0);
    }
  }
  if (sources_.before_collect) {
    sources_.before_collect();
  }
  return metrics::serialize(registry_);
}

}  // namespace llmd::epp
