// EPP executable: config -> pod registry + scraper + scheduling pipeline (+ predictor client,
// training feedback) -> streaming proxy on :8080, health on :9003, metrics on :9090.
// Reloads the config files when they change, without dropping requests: a new pipeline
// generation is swapped in and requests in flight finish on theirs.
#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <iostream>
#include <thread>

#include <spdlog/spdlog.h>

#include "common/config/logging.h"
#include "common/config/options.h"
#include "common/http/router.h"
#include "common/http/server.h"
#include "common/metrics/exposition.h"
#include "common/util/files.h"
#include "common/util/memory.h"
#include "epp/datastore/prefix_index.h"
#include "epp/datastore/scraper.h"
#include "epp/feedback/request_metrics.h"
#include "epp/feedback/training_feedback.h"
#include "epp/plugins/register.h"
#include "epp/discovery/leader_elector.h"
#include "epp/discovery/pod_discovery.h"
#include "epp/extproc/ext_proc_server.h"
#include "epp/pool_config.h"
#include "epp/predictor_client/predictor_client.h"
#include "epp/predictor_client/replica_set.h"
#include "epp/proxy/admission_gate.h"
#include "epp/proxy/proxy_server.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/director.h"
#include "epp/scheduler/metrics.h"
#include "epp/scheduling_port.h"

using namespace llmd;
using namespace llmd::epp;

namespace {

std::filesystem::file_time_type mtime(const std::string& path) {
  std::error_code ec;
  auto t = std::filesystem::last_write_time(path, ec);
  return ec ? std::filesystem::file_time_type{} : t;
}

int run(int argc, char** argv) {
  config::Options o("epp", "Endpoint picker: predicted-latency router for LLM inference");
  o.add("config", "EPP_CONFIG", "epp/config/local-pool.yaml", "Pool + pipeline config (YAML)");
  // Every listener binds loopback unless told otherwise: what a pod must open (the proxy for
  // a Service, ext_proc for a Gateway, health for the kubelet, metrics for Prometheus) its
  // manifest opens one by one (deploy/README.md, "Ports").
  o.add("host", "EPP_HOST", "127.0.0.1",
        "Address of the proxy port, and of every other listener whose own host flag is empty "
        "(loopback by default; 0.0.0.0 opens it)");
  o.add("health-host", "EPP_HEALTH_HOST", "", "Address of the health port (empty: --host)");
  o.add("metrics-host", "EPP_METRICS_HOST", "", "Address of the metrics port (empty: --host)");
  o.add("ext-proc-host", "EPP_EXT_PROC_HOST", "", "Address of the ext_proc port (empty: --host)");
  o.add("port", "EPP_PORT", "8080", "Proxy port (OpenAI API)");
  o.add("admin-token", "LLMD_ADMIN_TOKEN", "",
        "Bearer token the trainer requires on /add_training_data_bulk (its --admin-token)");
  o.add("drain-timeout", "EPP_DRAIN_TIMEOUT_S", "25",
        "Seconds requests in flight may take to finish after SIGTERM (below Kubernetes' 30 s "
        "grace period)");
  o.add("health-port", "EPP_HEALTH_PORT", "9003", "/healthz and /readyz port");
  o.add("metrics-port", "EPP_METRICS_PORT", "9090", "/metrics port");
  o.add("ext-proc-port", "EPP_EXT_PROC_PORT", "0",
        "Gateway mode: serve Envoy's ext_proc gRPC service (and gRPC health) on this port "
        "(the reference EPP uses 9002); 0 = off");
  o.add("prediction-server-url", "PREDICTION_SERVER_URL", "",
        "Comma list of predictor URLs (empty: composite scoring only)");
  o.add("training-server-url", "TRAINING_SERVER_URL", "", "Trainer URL for feedback (empty: off)");
  o.add("streaming-mode", "LATENCY_STREAMING_MODE", "true",
        "Training samples from SSE timings (TTFT + TPOT); false: TTFT := end-to-end");
  o.add("prediction-based-scheduling", "PREDICTION_BASED_SCHEDULING", "true",
        "Default of the x-prediction-based-scheduling header");
  o.add("prediction-deadline-ms", "PREDICTION_DEADLINE_MS", "50", "Wait for predictions at most this");
  o.add("coalesce-window-us", "PREDICTION_COALESCE_WINDOW_US", "1000", "Coalescing window");
  o.add("coalesce-adaptive", "PREDICTION_COALESCE_ADAPTIVE", "true",
        "Send a batch at once while none is in flight (the window runs only while one is)");
  o.add("io-threads", "EPP_IO_THREADS", "2", "Proxy I/O threads");
  o.add("header-timeout-ms", "EPP_HEADER_TIMEOUT_MS", "10000",
        "Time a client has to send a request's headers once it started");
  o.add("idle-timeout-ms", "EPP_IDLE_TIMEOUT_MS", "60000",
        "Keep-alive idle time between requests, and the bound of a body upload");
  o.add("upstream-first-byte-timeout-ms", "EPP_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "30000",
        "A pod that sends no response header within this is treated as failed");
  o.add("outlier-consecutive-failures", "EPP_OUTLIER_CONSECUTIVE_FAILURES", "5",
        "Outlier detection: a pod whose requests fail this many times in a row (connect error, "
        "timeout, 5xx, broken stream) is ejected; 0 = never");
  o.add("outlier-base-ejection-ms", "EPP_OUTLIER_BASE_EJECTION_MS", "30000",
        "Outlier detection: the first ejection's length; the n-th lasts n times as long");
  o.add("outlier-max-ejection-ms", "EPP_OUTLIER_MAX_EJECTION_MS", "300000",
        "Outlier detection: no ejection lasts longer");
  o.add("outlier-max-ejection-percent", "EPP_OUTLIER_MAX_EJECTION_PERCENT", "10",
        "Outlier detection: at most this share of the pool is ejected at once (always >= 1 pod)");
  o.add("panic-threshold-percent", "EPP_PANIC_THRESHOLD_PERCENT", "50",
        "Below this share of healthy pods (fresh metrics, not ejected) the EPP routes over every "
        "pod that ever answered a scrape instead of answering 503; 0 = never");
  o.add("forward-priority", "EPP_FORWARD_PRIORITY", "true",
        "Forward a non-zero soft priority to the pod as vLLM's `priority` (lower = first; the "
        "pods need --scheduling-policy priority)");
  o.add("max-body-bytes", "EPP_MAX_BODY_BYTES", "16777216", "Largest accepted request body");
  o.add("body-budget-bytes", "EPP_BODY_BUDGET_BYTES", "268435456",
        "Request bodies held at once (503 + Retry-After beyond)");
  o.add("reload-check-ms", "EPP_RELOAD_CHECK_MS", "1000", "How often config files are checked");
  o.add("pool-name", "EPP_POOL_NAME", "",
        "Kubernetes discovery: the InferencePool whose selector and target port name the pods "
        "(the config file then lists no pods)");
  o.add("pool-namespace", "EPP_POOL_NAMESPACE", "",
        "Kubernetes discovery: namespace of the pool and its pods (default: the service "
        "account's)");
  o.add("pool-selector", "EPP_POOL_SELECTOR", "",
        "Kubernetes discovery without an InferencePool: pod labels k=v[,k2=v2]");
  o.add("target-port", "EPP_TARGET_PORT", "8000",
        "Kubernetes discovery: the pods' serving port (an InferencePool's port wins)");
  o.add("kube-api-url", "EPP_KUBE_API_URL", "",
        "Kubernetes API server (http(s)://host:port; default: in-cluster, e.g. kubectl proxy "
        "at http://127.0.0.1:8001 outside)");
  o.add("kube-token-file", "EPP_KUBE_TOKEN_FILE",
        "/var/run/secrets/kubernetes.io/serviceaccount/token",
        "Kubernetes API (discovery, leader election): bearer token (re-read on every request; it "
        "rotates)");
  o.add("kube-ca-file", "EPP_KUBE_CA_FILE", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
        "Kubernetes API (discovery, leader election): CA certificate of an https API server");
  o.add("leader-elect", "EPP_LEADER_ELECT", "false",
        "Active-passive replicas: only the holder of a coordination.k8s.io/v1 Lease is ready and "
        "serves; the others stand by warm (pods, metrics, predictions) and answer 503");
  o.add("leader-elect-lease-duration", "EPP_LEADER_ELECT_LEASE_DURATION_S", "15",
        "Leader election: whole seconds a Lease stays valid without renewal (a standby takes it "
        "over after this long)");
  o.add("leader-elect-renew-deadline", "EPP_LEADER_ELECT_RENEW_DEADLINE_S", "10",
        "Leader election: seconds a leader may fail to renew before it stops serving (< lease "
        "duration)");
  o.add("leader-elect-retry-period", "EPP_LEADER_ELECT_RETRY_PERIOD_S", "2",
        "Leader election: seconds between renewals (leader) or attempts to acquire (standby)");
  o.add("leader-elect-lease-name", "EPP_LEADER_ELECT_LEASE_NAME", "",
        "Leader election: the Lease (default llmd-epp-<pool-name>, or llmd-epp)");
  o.add("leader-elect-lease-namespace", "EPP_LEADER_ELECT_LEASE_NAMESPACE", "",
        "Leader election: the Lease's namespace (default: --pool-namespace, else the service "
        "account's)");
  o.add("leader-elect-identity", "POD_NAME", "",
        "Leader election: this replica's name in the Lease, unique per replica (default: the "
        "host name, which is the pod's name)");
  o.add("decision-log-sample-rate", "EPP_DECISION_LOG_SAMPLE_RATE", "0",
        "Share of requests whose scheduling decision is logged (one 'decision {json}' line at "
        "info level: candidates, predictions, filters, scores, pick); the config file's "
        "decisionLog.sampleRate overrides it on every reload; 0 = off");
  o.add("decision-log-max-lines-per-second", "EPP_DECISION_LOG_MAX_LINES_PER_SECOND", "10",
        "Decision log line budget (sampled requests beyond it are counted, not logged)");
  o.add("allow-debug-header", "EPP_ALLOW_DEBUG_HEADER", "false",
        "Answer a request that sends x-llmd-debug: 1 with its scheduling decision in the "
        "x-llmd-decision response header (shows pod names and load to clients: off by default)");
  o.add("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error");
  if (!o.parse(argc, argv)) {
    return 0;
  }
  config::init_logging(o.str("log-level"), "epp");
  const std::string config_path = o.str("config");
  const bool discover = !o.str("pool-name").empty() || !o.str("pool-selector").empty();
  const PodSource pod_source = discover ? PodSource::kKubernetes : PodSource::kConfig;
  EppFileConfig file_cfg = load_epp_config(config_path, pod_source);

  prometheus::Registry registry;
  SchedulerMetrics sched_metrics(registry);
  PrefixIndex prefix_index;
  std::unique_ptr<predictor_client::PredictorClient> predictions;
  const std::string urls = o.str("prediction-server-url");
  if (!urls.empty()) {
    std::string error;
    auto list = predictor_client::parse_replica_list(urls, &error);
    if (!list) {
      throw std::invalid_argument("--prediction-server-url / PREDICTION_SERVER_URL: " + error);
    }
    predictor_client::PredictorClientConfig pc;
    pc.replica_urls = *list;
    pc.request_deadline = std::chrono::milliseconds(o.integer("prediction-deadline-ms", 1, 60000));
    pc.coalesce_window = std::chrono::microseconds(o.integer("coalesce-window-us", 0, 1000000));
    pc.adaptive_coalescing = o.boolean("coalesce-adaptive");
    predictions = std::make_unique<predictor_client::PredictorClient>(pc, registry);
  } else {
    spdlog::warn("no PREDICTION_SERVER_URL: scheduling with the composite fallback only");
  }
  PluginRegistry plugins;
  register_builtin_plugins(plugins);
  Handle handle{prefix_index, predictions.get(), nullptr, nullptr};
  auto load = [&](const EppFileConfig& c) {
    return c.pipeline_path.empty()
               ? load_pipeline(c.pipeline_text, plugins, handle, &sched_metrics)
               : load_pipeline_file(c.pipeline_path, plugins, handle, &sched_metrics);
  };
  LoadResult loaded = load(file_cfg);
  if (!loaded.ok()) {
    throw std::runtime_error("pipeline config: " + loaded.error);
  }
  DecisionLogConfig decision_log_flags;
  decision_log_flags.sample_rate = o.number("decision-log-sample-rate", 0, 1);
  decision_log_flags.max_lines_per_second =
      o.number("decision-log-max-lines-per-second", 0.001, 1e6);
  DecisionLog decision_log(file_cfg.decision_log.over(decision_log_flags), {}, &registry);
  Director director(loaded.pipeline, &sched_metrics, &decision_log);
  if (const auto d = decision_log.config(); d.sample_rate > 0) {
    spdlog::info("decision log: sample rate {}, at most {} lines/s", d.sample_rate,
                 d.max_lines_per_second);
  }
  PodRegistry pods(file_cfg.staleness);
  pods.set_pods(file_cfg.pods);
  OutlierDetectionOptions outliers;
  outliers.consecutive_failures = static_cast<int>(o.integer("outlier-consecutive-failures", 0, 1000));
  outliers.base_ejection = std::chrono::milliseconds(o.integer("outlier-base-ejection-ms", 1));
  outliers.max_ejection = std::chrono::milliseconds(o.integer("outlier-max-ejection-ms", 1));
  outliers.max_ejection_percent = o.number("outlier-max-ejection-percent", 0, 100);
  outliers.panic_threshold_percent = o.number("panic-threshold-percent", 0, 100);
  if (auto error = outliers.validate(); !error.empty()) {
    throw std::runtime_error(error);
  }
  pods.configure_outlier_detection(outliers);
  ScraperOptions so;
  so.interval = file_cfg.scrape_interval;
  Scraper scraper(so, pods);

  FeedbackOptions fo;
  fo.trainer_url = o.str("training-server-url");
  fo.streaming_mode = o.boolean("streaming-mode");
  fo.admin_token = o.str("admin-token");
  TrainingFeedback feedback(fo, &registry);
  RequestMetrics request_metrics(registry);
  request_metrics.set_pool_serves([&pods](const std::string& model) {
    return pods.serves_model(model);
  });
  CompletionFanout sinks;
  sinks.add(feedback);
  sinks.add(request_metrics);

  EppSchedulingPort port(director, pods, predictions.get());
  port.set_config(file_cfg.objectives, file_cfg.load_balancing, director.pipeline());
  AdmissionGate gate([&port](const std::string& pool) { return port.pool_candidates(pool); },
                     &registry);
  gate.configure(file_cfg.router_queue);
  sinks.add(port);
  std::unique_ptr<discovery::LeaderElector> elector;
  if (o.boolean("leader-elect")) {
    discovery::LeaderElectionConfig lc;
    lc.identity = o.str("leader-elect-identity");
    if (lc.identity.empty()) {
      char host[256] = {};
      if (gethostname(host, sizeof(host) - 1) == 0) {
        lc.identity = host;
      }
    }
    lc.lease_name = o.str("leader-elect-lease-name");
    if (lc.lease_name.empty()) {
      lc.lease_name = o.str("pool-name").empty() ? "llmd-epp" : "llmd-epp-" + o.str("pool-name");
    }
    lc.lease_namespace = o.str("leader-elect-lease-namespace");
    if (lc.lease_namespace.empty()) {
      lc.lease_namespace = o.str("pool-namespace");
    }
    if (lc.lease_namespace.empty()) {
      lc.lease_namespace = discovery::service_account_namespace(
          discovery::DiscoveryOptions{}.namespace_file);
    }
    lc.lease_duration = std::chrono::seconds(o.integer("leader-elect-lease-duration", 1, 3600));
    lc.renew_deadline = std::chrono::milliseconds(
        static_cast<int64_t>(o.number("leader-elect-renew-deadline", 0.001, 3600) * 1000));
    lc.retry_period = std::chrono::milliseconds(
        static_cast<int64_t>(o.number("leader-elect-retry-period", 0.001, 3600) * 1000));
    elector = std::make_unique<discovery::LeaderElector>(
        lc, discovery::KubeApiOptions{o.str("kube-api-url"), o.str("kube-token-file"),
                                      o.str("kube-ca-file")});
  }
  // A standby's answer to data requests and probes; nullopt on the leader (or without election).
  auto standby = [&elector]() -> std::optional<std::string> {
    if (!elector || elector->leading()) {
      return std::nullopt;
    }
    const std::string leader = elector->leader();
    return "Not the leader: this EPP replica is a standby" +
           (leader.empty() ? std::string() : " (the leader is " + leader + ")");
  };
  auto& leader_g = prometheus::BuildGauge().Name("llmd_epp_leader").Help(
      "1 while this EPP replica serves: the leader of --leader-elect, or always without it; 0 "
      "while it stands by").Register(registry).Add({});

  ProxyOptions po;
  po.host = o.str("host");
  po.port = static_cast<uint16_t>(o.integer("port", 0, 65535));
  po.io_threads = static_cast<int>(o.integer("io-threads", 1, 64));
  po.body_limit = static_cast<std::size_t>(o.integer("max-body-bytes", 1024));
  po.body_budget = static_cast<std::size_t>(o.integer("body-budget-bytes", 1024));
  po.header_timeout = std::chrono::milliseconds(o.integer("header-timeout-ms", 1, 3600000));
  po.idle_timeout = std::chrono::milliseconds(o.integer("idle-timeout-ms", 1, 86400000));
  po.upstream_first_byte_timeout =
      std::chrono::milliseconds(o.integer("upstream-first-byte-timeout-ms", 10));
  po.default_prediction = o.boolean("prediction-based-scheduling");
  po.forward_priority = o.boolean("forward-priority");
  po.not_serving = standby;
  po.allow_debug_header = o.boolean("allow-debug-header");
  auto& upstream_family = prometheus::BuildCounter().Name("llmd_epp_upstream_connections_total").Help(
      "Connections to pods for proxied requests: opened, or kept-alive ones reused").Register(registry);
  po.upstream_opened = &upstream_family.Add({{"connection", "opened"}});
  po.upstream_reused = &upstream_family.Add({{"connection", "reused"}});
  const std::chrono::milliseconds drain_timeout(
      static_cast<int64_t>(o.number("drain-timeout", 0, 3600) * 1000));
  ProxyServer proxy(po, port, pods, sinks, &gate);
  std::unique_ptr<extproc::ExtProcServer> ext_proc;
  if (const auto ext_port = o.integer("ext-proc-port", 0, 65535); ext_port > 0) {
    extproc::ExtProcServerOptions eo;
    eo.host = o.str("ext-proc-host").empty() ? po.host : o.str("ext-proc-host");
    eo.port = static_cast<uint16_t>(ext_port);
    eo.stream.body_limit = po.body_limit;
    eo.stream.default_prediction = po.default_prediction;
    eo.stream.forward_priority = po.forward_priority;
    eo.stream.not_serving = standby;
    eo.stream.allow_debug_header = po.allow_debug_header;
    ext_proc = std::make_unique<extproc::ExtProcServer>(
        eo, extproc::ExtProcServices{&port, &pods, &sinks, &gate});
  }

  // Pool gauges computed at scrape time.
  auto& pool_family = prometheus::BuildGauge().Name("llmd_epp_pool").Help(
      "Pool state: ready pods, average KV usage and queue of ready pods, prefix index size").Register(registry);
  auto& ready_g = pool_family.Add({{"stat", "ready_pods"}});
  auto& kv_g = pool_family.Add({{"stat", "avg_kv_cache_usage"}});
  auto& queue_g = pool_family.Add({{"stat", "avg_waiting"}});
  auto& prefix_blocks_g = pool_family.Add({{"stat", "prefix_index_blocks"}});
  auto& prefix_hit_g = pool_family.Add({{"stat", "prefix_index_hit_ratio"}});
  auto& queue_len_g = pool_family.Add({{"stat", "router_queue_length"}});
  auto& healthy_g = pool_family.Add({{"stat", "healthy_pods"}});
  auto& ejected_g = pool_family.Add({{"stat", "ejected_pods"}});
  auto& panic_g = pool_family.Add({{"stat", "panic_mode"}});
  auto& idle_upstream_g = pool_family.Add({{"stat", "idle_upstream_connections"}});
  auto& ejections_family = prometheus::BuildCounter().Name("llmd_epp_pod_ejections_total").Help(
      "Outlier ejections of a pod after consecutive failed requests").Register(registry);
  auto& ejected_family = prometheus::BuildGauge().Name("llmd_epp_pod_ejected").Help(
      "1 while outlier detection keeps this pod out of the candidates").Register(registry);
  pods.set_ejection_listener(
      [&ejections_family](const std::string& pod, std::chrono::milliseconds, int64_t) {
        ejections_family.Add({{"pod", pod}}).Increment();
      });
  auto& in_flight_family = prometheus::BuildGauge().Name("llmd_epp_pod_in_flight").Help(
      "Requests this EPP dispatched to a ready pod that have not finished (its exact "
      "bookkeeping)").Register(registry);
  auto& residual_family = prometheus::BuildGauge().Name("llmd_epp_pod_latency_residual_factor").Help(
      "What this pod's predicted TTFT / TPOT is multiplied by: how much slower (> 1) or faster "
      "than its pool's other pods it has been against the model (1 = no significant "
      "difference; applied with podResidualCorrection)").Register(registry);
  auto& bound_family = prometheus::BuildGauge().Name("llmd_epp_pool_latency_bound_factor").Help(
      "What the pool's predicted TTFT / TPOT bounds would have had to be multiplied by to hold "
      "for 9 of its latest requests in 10 (1 = not enough requests yet; SLO checks use it with "
      "sloBoundCalibration)").Register(registry);
  auto& step_family = prometheus::BuildGauge().Name("llmd_epp_pod_step_milliseconds").Help(
      "Typical duration of this pod's forward passes, from the gaps between the tokens of the "
      "streams this EPP relays (0 = not measured yet; the step phase of stepPhaseCorrection)")
      .Register(registry);
  auto& routing_family = prometheus::BuildGauge().Name("llmd_epp_latency_routing_target").Help(
      "Model-level latency routing per rule and target: rolling average response time (ms), "
      "samples in the window, fast (1 = receives traffic)").Register(registry);
  http::Router admin;
  admin.add("GET", "/healthz", [](http::Request&) {
    return http::Response::json(200, nlohmann::json{{"status", "ok"}});
  });
  std::atomic<bool> draining{false};
  admin.add("GET", "/readyz", [&pods, &draining, &standby](http::Request&) {
    if (draining) {
      return http::Response::detail(503, "Draining: shutting down");
    }
    if (auto reason = standby()) {
      return http::Response::detail(503, *reason);
    }
    std::size_t ready = pods.ready_count(std::chrono::steady_clock::now());
    if (ready == 0) {
      return http::Response::detail(503, "No ready model server pods");
    }
    return http::Response::json(200, nlohmann::json{{"status", "ready"}, {"ready_pods", ready}});
  });
  admin.add("GET", "/metrics", [&](http::Request&) {
    const auto now = std::chrono::steady_clock::now();
    auto c = pods.candidates(now);
    const PodRegistry::Health health = pods.health(now);
    healthy_g.Set(static_cast<double>(health.healthy));
    ejected_g.Set(static_cast<double>(health.ejected));
    panic_g.Set(health.panic ? 1 : 0);
    idle_upstream_g.Set(static_cast<double>(proxy.idle_upstream_connections()));
    for (const auto& p : pods.pod_health(now)) {
      ejected_family.Add({{"pod", p.name}}).Set(p.ejected ? 1 : 0);
    }
    double kv = 0, q = 0;
    for (const auto& e : c) {
      kv += e.metrics.kv_cache_usage;
      q += static_cast<double>(e.metrics.waiting);
      in_flight_family.Add({{"pod", e.name}}).Set(static_cast<double>(e.dispatched));
      residual_family.Add({{"pod", e.name}, {"latency", "ttft"}}).Set(e.ttft_residual_factor);
      residual_family.Add({{"pod", e.name}, {"latency", "tpot"}}).Set(e.tpot_residual_factor);
      step_family.Add({{"pod", e.name}}).Set(e.step ? e.step->step_ms : 0.0);
      bound_family.Add({{"pool", e.pool()}, {"latency", "ttft"}}).Set(e.ttft_bound_factor);
      bound_family.Add({{"pool", e.pool()}, {"latency", "tpot"}}).Set(e.tpot_bound_factor);
    }
    ready_g.Set(static_cast<double>(c.size()));
    kv_g.Set(c.empty() ? 0 : kv / static_cast<double>(c.size()));
    queue_g.Set(c.empty() ? 0 : q / static_cast<double>(c.size()));
    auto st = prefix_index.stats();
    prefix_blocks_g.Set(static_cast<double>(st.blocks));
    prefix_hit_g.Set(st.queried_blocks == 0 ? 0 : static_cast<double>(st.matched_blocks) /
                                                     static_cast<double>(st.queried_blocks));
    queue_len_g.Set(static_cast<double>(gate.pending()));
    leader_g.Set(standby() ? 0 : 1);
    if (auto router = port.latency_router()) {
      for (const auto& t : router->status(std::chrono::steady_clock::now())) {
        auto set = [&](const char* stat, double v) {
          routing_family.Add({{"rule", t.rule_id}, {"target", t.target}, {"stat", stat}}).Set(v);
        };
        set("avg_response_ms", t.average_ms);
        set("samples", static_cast<double>(t.samples));
        set("fast", t.fast ? 1 : 0);
      }
    }
    return http::Response::text(200, metrics::serialize(registry), metrics::kContentType);
  });
  auto handler = [&admin](http::Request& r) { return admin.route(r); };
  http::ServerOptions ho;
  ho.io_threads = 1;
  // Probes and scrapes are answered even while clients hold every descriptor the proxy may use.
  ho.max_connections = 64;
  ho.descriptors_per_connection = 0;
  const std::string health_host = o.str("health-host").empty() ? po.host : o.str("health-host");
  const std::string metrics_host =
      o.str("metrics-host").empty() ? po.host : o.str("metrics-host");
  ho.host = health_host;
  ho.port = static_cast<uint16_t>(o.integer("health-port", 0, 65535));
  http::HttpServer health(ho, handler);
  ho.host = metrics_host;
  ho.port = static_cast<uint16_t>(o.integer("metrics-port", 0, 65535));
  http::HttpServer metrics_server(ho, handler);

  std::unique_ptr<discovery::PodDiscovery> pod_discovery;
  if (discover) {
    discovery::DiscoveryOptions d;
    d.api_url = o.str("kube-api-url");
    d.pool_name = o.str("pool-name");
    d.pool_namespace = o.str("pool-namespace");
    d.selector = discovery::parse_selector(o.str("pool-selector"));
    d.target_port = static_cast<uint16_t>(o.integer("target-port", 1, 65535));
    d.token_file = o.str("kube-token-file");
    d.ca_file = o.str("kube-ca-file");
    pod_discovery = std::make_unique<discovery::PodDiscovery>(
        d, [&pods](const std::vector<PodConfig>& endpoints) { pods.set_pods(endpoints); });
    pod_discovery->start();
    spdlog::info("pods from Kubernetes: {}", d.pool_name.empty()
                                                 ? "selector " + o.str("pool-selector")
                                                 : "InferencePool " + d.pool_name);
  }
  proxy.start();
  if (ext_proc) {
    ext_proc->start();
    spdlog::info("gateway mode: ext_proc gRPC on {}:{}",
                 o.str("ext-proc-host").empty() ? po.host : o.str("ext-proc-host"),
                 ext_proc->port());
  }
  health.start();
  metrics_server.start();
  scraper.start();
  if (elector) {
    elector->start();
  }
  feedback.start();
  std::thread health_thread([&] { health.run(false); });
  std::thread metrics_thread([&] { metrics_server.run(false); });

  // Config reload: poll mtimes; a bad new config is logged and the old one kept.
  std::atomic<bool> stopping{false};
  std::thread reloader([&] {
    auto pool_time = mtime(config_path);
    auto pipe_time = file_cfg.pipeline_path.empty() ? pool_time : mtime(file_cfg.pipeline_path);
    auto lb_time = mtime(file_cfg.load_balancing_path);
    const auto period = std::chrono::milliseconds(o.integer("reload-check-ms", 10));
    while (!stopping) {
      std::this_thread::sleep_for(period);
      try {
        auto pt = mtime(config_path);
        EppFileConfig next = load_epp_config(config_path, pod_source);
        auto qt = next.pipeline_path.empty() ? pt : mtime(next.pipeline_path);
        auto lt = mtime(next.load_balancing_path);
        if (pt == pool_time && qt == pipe_time && lt == lb_time) {
          continue;
        }
        pool_time = pt;
        pipe_time = qt;
        lb_time = lt;
        LoadResult l = load(next);
        if (!l.ok()) {
          spdlog::error("config reload refused, keeping the current pipeline: {}", l.error);
          continue;
        }
        if (!discover) {
          pods.set_pods(next.pods);  // with discovery the API server owns the pod set
        }
        port.set_config(next.objectives, next.load_balancing, l.pipeline);
        gate.configure(next.router_queue);
        decision_log.configure(next.decision_log.over(decision_log_flags));
        spdlog::info("config reloaded: {} pods, {} objectives, {} routing rules, router queue {}",
                     next.pods.size(), next.objectives->size(),
                     next.load_balancing ? next.load_balancing->rules.size() : 0,
                     next.router_queue ? "on" : "off");
      } catch (const std::exception& e) {
        spdlog::error("config reload refused, keeping the current config: {}", e.what());
      }
    }
  });

  spdlog::info("epp proxy on {}:{}, health {}:{}, metrics {}:{}; {} pods; predictions {}; "
               "feedback {}",
               po.host, proxy.port(), health_host, health.port(), metrics_host,
               metrics_server.port(), file_cfg.pods.size(),
               predictions ? urls : "off", fo.trainer_url.empty() ? "off" : fo.trainer_url);
  spdlog::info("policies: {} objectives, {} model-level routing rules, router queue {}",
               file_cfg.objectives->size(),
               file_cfg.load_balancing ? file_cfg.load_balancing->rules.size() : 0,
               file_cfg.router_queue
                   ? std::string(to_string(file_cfg.router_queue->queue.policy))
                   : std::string("off"));
  std::thread proxy_thread([&] { proxy.run(); });
  // The router queue also drains on fresh scrapes and expires waiters by its timeout.
  // It also keeps the gRPC readiness (gateway mode) in step with /readyz.
  std::thread gate_ticker([&] {
    int ticks = 0;
    std::optional<bool> grpc_ready;
    while (!stopping) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      gate.tick();
      if (ext_proc && ++ticks % 20 == 0) {
        const bool ready = !draining && !standby() &&
                           pods.ready_count(std::chrono::steady_clock::now()) > 0;
        if (grpc_ready != ready) {
          grpc_ready = ready;
          ext_proc->set_ready(ready);
        }
      }
    }
  });
  {
    // Block until a signal arrives.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    int sig = 0;
    sigwait(&set, &sig);
    spdlog::info("signal {}: draining for up to {} s", sig, drain_timeout.count() / 1000.0);
  }
  // Readiness drops first so the load balancer stops sending; requests in flight finish.
  draining = true;
  // A leader hands its Lease over now, so that a standby serves within its retry period while
  // the requests in flight here finish.
  std::thread hand_over([&] {
    if (elector) {
      elector->stop();
    }
  });
  std::thread ext_proc_drain([&] {
    if (ext_proc) {
      ext_proc->shutdown(drain_timeout);  // streams in flight finish, new ones are refused
    }
  });
  proxy.drain(drain_timeout);
  ext_proc_drain.join();
  hand_over.join();
  stopping = true;
  proxy_thread.join();
  health.stop();
  metrics_server.stop();
  health_thread.join();
  metrics_thread.join();
  reloader.join();
  gate_ticker.join();
  if (pod_discovery) {
    pod_discovery->stop();
  }
  scraper.stop();
  feedback.stop();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Signals are taken synchronously by sigwait in run(); block them in every thread.
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  llmd::util::return_large_blocks_to_the_system();
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "epp: " << e.what() << std::endl;
    return 2;
  }
}
