#include "epp/app/epp_options.h"

#include <cstdlib>
#include <stdexcept>

#include "common/config/flag_table.h"
#include "common/http/client.h"
#include "epp/app/gie_metrics.h"
#include "epp/app/upstream_flags.h"
#include "epp/predictor_client/replica_set.h"

namespace llmd::epp {

using config::cast_into;
using config::count_into;
using config::into;
using config::seconds_into;

namespace {

// Discovery and leader election: both talk to the Kubernetes API server.
void add_kubernetes_flags(config::FlagTable& t, EppOptions& e) {
  discovery::DiscoveryOptions& d = e.discovery;
  discovery::LeaderElectionConfig& l = e.leader_election;
  t.text("pool-name", "EPP_POOL_NAME", "",
         "Kubernetes discovery: the InferencePool whose selector and target port name the pods "
         "(the config file then lists no pods)",
         into(d.pool_name));
  t.text("pool-namespace", "EPP_POOL_NAMESPACE,NAMESPACE", "",
         "Kubernetes discovery: namespace of the pool and its pods (default: the service "
         "account's)",
         into(d.pool_namespace));
  t.text("pool-selector", "EPP_POOL_SELECTOR", "",
         "Kubernetes discovery without an InferencePool: pod labels k=v[,k2=v2]",
         into(e.pool_selector));
  t.when([&e] { return e.discover(); });  // checked only with discovery, as ever
  t.integer("target-port", "EPP_TARGET_PORT", "8000",
            "Kubernetes discovery: the pods' serving port (an InferencePool's port wins)",
            {1, 65535}, cast_into(d.target_port));
  t.always();
  t.text("kube-api-url", "EPP_KUBE_API_URL", "",
         "Kubernetes API server (http(s)://host:port; default: in-cluster, e.g. kubectl proxy "
         "at http://127.0.0.1:8001 outside)",
         into(d.api_url));
  t.text("kube-token-file", "EPP_KUBE_TOKEN_FILE",
         "/var/run/secrets/kubernetes.io/serviceaccount/token",
         "Kubernetes API (discovery, leader election): bearer token (re-read on every request; "
         "it rotates)",
         into(d.token_file));
  t.text("kube-ca-file", "EPP_KUBE_CA_FILE",
         "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
         "Kubernetes API (discovery, leader election): CA certificate of an https API server",
         into(d.ca_file));
  t.boolean("leader-elect", "EPP_LEADER_ELECT", "false",
            "Active-passive replicas: only the holder of a coordination.k8s.io/v1 Lease is ready "
            "and serves; the others stand by warm (pods, metrics, predictions) and answer 503",
            into(e.leader_elect));
  t.when([&e] { return e.leader_elect; });  // checked only with leader election, as ever
  t.integer("leader-elect-lease-duration", "EPP_LEADER_ELECT_LEASE_DURATION_S", "15",
            "Leader election: whole seconds a Lease stays valid without renewal (a standby "
            "takes it over after this long)",
            {1, 3600}, count_into(l.lease_duration));
  t.number("leader-elect-renew-deadline", "EPP_LEADER_ELECT_RENEW_DEADLINE_S", "10",
           "Leader election: seconds a leader may fail to renew before it stops serving (< "
           "lease duration)",
           {0.001, 3600}, seconds_into(l.renew_deadline));
  t.number("leader-elect-retry-period", "EPP_LEADER_ELECT_RETRY_PERIOD_S", "2",
           "Leader election: seconds between renewals (leader) or attempts to acquire "
           "(standby)",
           {0.001, 3600}, seconds_into(l.retry_period));
  t.always();
  t.text("leader-elect-lease-name", "EPP_LEADER_ELECT_LEASE_NAME", "",
         "Leader election: the Lease (default llmd-epp-<pool-name>, or llmd-epp)",
         into(l.lease_name));
  t.text("leader-elect-lease-namespace", "EPP_LEADER_ELECT_LEASE_NAMESPACE", "",
         "Leader election: the Lease's namespace (default: --pool-namespace, else the service "
         "account's)",
         into(l.lease_namespace));
  t.text("leader-elect-identity", "POD_NAME", "",
         "Leader election: this replica's name in the Lease, unique per replica (default: the "
         "host name plus a random suffix, as client-go's)",
         into(l.identity));
}

// Seconds ("25", "2.5") or a Go duration ("30s"), 0-3600 s.
std::chrono::milliseconds parse_drain_timeout(const std::string& v) {
  char* end = nullptr;
  const double seconds = std::strtod(v.c_str(), &end);
  std::optional<std::chrono::milliseconds> d;
  if (!v.empty() && end != nullptr && *end == '\0') {
    if (seconds >= 0) {
      d = std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    }
  } else {
    d = config::parse_go_duration(v);
  }
  if (!d || *d > std::chrono::hours(1)) {
    throw std::invalid_argument("--drain-timeout / EPP_DRAIN_TIMEOUT_S: expected seconds or a "
                                "duration such as 30s, at most 1h, got '" + v + "'");
  }
  return *d;
}

// The EPP's flags, in --help order. Hosts stay raw here and are resolved after reading.
void add_flags(config::FlagTable& t, EppOptions& e, std::string& health_host,
               std::string& metrics_host, std::string& ext_proc_host) {
  ProxyOptions& p = e.proxy;
  t.text("config", "EPP_CONFIG", "epp/config/local-pool.yaml", "Pool + pipeline config (YAML)",
         into(e.config_path));
  // Every listener binds loopback unless told otherwise: what a pod must open (the proxy for
  // a Service, ext_proc for a Gateway, health for the kubelet, metrics for Prometheus) its
  // manifest opens one by one (deploy/README.md, "Ports").
  t.text("host", "EPP_HOST", "127.0.0.1",
         "Address of the proxy port, and of every other listener whose own host flag is empty "
         "(loopback by default; 0.0.0.0 opens it)",
         into(p.host));
  t.text("health-host", "EPP_HEALTH_HOST", "", "Address of the health port (empty: --host)",
         into(health_host));
  t.text("metrics-host", "EPP_METRICS_HOST", "", "Address of the metrics port (empty: --host)",
         into(metrics_host));
  t.text("ext-proc-host", "EPP_EXT_PROC_HOST", "", "Address of the ext_proc port (empty: --host)",
         into(ext_proc_host));
  t.integer("port", "EPP_PORT", "8080", "Proxy port (OpenAI API)", {0, 65535}, cast_into(p.port));
  t.text("admin-token", "LLMD_ADMIN_TOKEN", "",
         "Bearer token the trainer requires on /add_training_data_bulk (its --admin-token)",
         into(e.feedback.admin_token));
  t.text("drain-timeout", "EPP_DRAIN_TIMEOUT_S", "25",
         "Time requests in flight may take to finish after SIGTERM: seconds, or a duration as "
         "llm-d's flag takes it (30s, 1m); below Kubernetes' 30 s grace period",
         [&e](const std::string& v) { e.drain_timeout = parse_drain_timeout(v); });
  t.integer("health-port", "EPP_HEALTH_PORT", "9003", "/healthz and /readyz port", {0, 65535},
            cast_into(e.health_port));
  t.integer("metrics-port", "EPP_METRICS_PORT", "9090", "/metrics port", {0, 65535},
            cast_into(e.metrics_port));
  t.integer("ext-proc-port", "EPP_EXT_PROC_PORT", "0",
            "Gateway mode: serve Envoy's ext_proc gRPC service (and gRPC health) on this port "
            "(the reference EPP uses 9002); 0 = off",
            {0, 65535}, cast_into(e.ext_proc_port));
  t.text("prediction-server-url", "PREDICTION_SERVER_URL", "",
         "Comma list of predictor URLs (empty: composite scoring only)",
         into(e.prediction_server_url));
  t.text("training-server-url", "TRAINING_SERVER_URL", "",
         "Trainer URL for feedback, and for the models with --in-process-predictions (empty: off)",
         into(e.feedback.trainer_url));
  t.boolean("in-process-predictions", "IN_PROCESS_PREDICTIONS", "false",
            "Predict in the EPP from the trainer's models (synced from --training-server-url as "
            "a predictor does) instead of asking predictor replicas; excludes "
            "--prediction-server-url",
            into(e.in_process_predictions));
  t.when([&e] { return e.in_process_predictions; });
  t.number("model-sync-interval", "MODEL_SYNC_INTERVAL_SEC", "10",
           "In-process predictions: seconds between model syncs", {0.05, 86400},
           seconds_into(e.in_process.sync_interval));
  t.number("model-sync-timeout", "MODEL_SYNC_TIMEOUT_SEC", "5",
           "In-process predictions: seconds each call to the trainer may take", {0.1, 3600},
           seconds_into(e.in_process.sync_timeout));
  t.text("local-model-dir", "LOCAL_MODEL_DIR", "",
         "In-process predictions: keep a copy of each model here, so that a restarted EPP "
         "predicts before its first sync (empty: memory only)",
         into(e.in_process.model_dir));
  t.always();
  // The training mode lives in the pipeline, where upstream defines it (one place).
  t.text("streaming-mode", "LATENCY_STREAMING_MODE", "",
         "Moved: set streamingMode on the pipeline's predicted-latency-producer (given: exit 2)",
         [](const std::string& v) {
           if (!v.empty()) {
             throw std::invalid_argument(
                 "--streaming-mode / LATENCY_STREAMING_MODE is gone: the training mode is the "
                 "pipeline's, as upstream defines it: set `streamingMode: " + v +
                 "` in the parameters of predicted-latency-producer (default false: TTFT := "
                 "end-to-end latency)");
           }
         });
  t.boolean("prediction-based-scheduling", "PREDICTION_BASED_SCHEDULING", "true",
            "Default of the x-prediction-based-scheduling header", into(p.default_prediction));
  // Checked only with a predictor (unused without one; the EPP has never refused them then).
  t.when([&e] { return !e.prediction_server_url.empty(); });
  t.integer("prediction-deadline-ms", "PREDICTION_DEADLINE_MS", "50",
            "Wait for predictions at most this", {1, 60000},
            count_into(e.predictor.request_deadline));
  t.integer("coalesce-window-us", "PREDICTION_COALESCE_WINDOW_US", "1000", "Coalescing window",
            {0, 1000000}, count_into(e.predictor.coalesce_window));
  t.boolean("coalesce-adaptive", "PREDICTION_COALESCE_ADAPTIVE", "true",
            "Send a batch at once while none is in flight (the window runs only while one is)",
            into(e.predictor.adaptive_coalescing));
  t.always();
  t.integer("io-threads", "EPP_IO_THREADS", "2", "Proxy workers: event loops of one thread each, connections spread over them", {1, 64},
            cast_into(p.io_threads));
  t.integer("header-timeout-ms", "EPP_HEADER_TIMEOUT_MS", "10000",
            "Time a client has to send a request's headers once it started", {1, 3600000},
            count_into(p.header_timeout));
  t.integer("idle-timeout-ms", "EPP_IDLE_TIMEOUT_MS", "60000",
            "Keep-alive idle time between requests, and the bound of a body upload",
            {1, 86400000}, count_into(p.idle_timeout));
  t.integer("upstream-first-byte-timeout-ms", "EPP_UPSTREAM_FIRST_BYTE_TIMEOUT_MS", "30000",
            "A pod that sends no response header within this is treated as failed", {10, {}},
            count_into(p.upstream_first_byte_timeout));
  t.integer("outlier-consecutive-failures", "EPP_OUTLIER_CONSECUTIVE_FAILURES", "5",
            "Outlier detection: a pod whose requests fail this many times in a row (connect "
            "error, timeout, 5xx, broken stream) is ejected; 0 = never",
            {0, 1000}, cast_into(e.outliers.consecutive_failures));
  t.integer("outlier-base-ejection-ms", "EPP_OUTLIER_BASE_EJECTION_MS", "30000",
            "Outlier detection: the first ejection's length; the n-th lasts n times as long",
            {1, {}}, count_into(e.outliers.base_ejection));
  t.integer("outlier-max-ejection-ms", "EPP_OUTLIER_MAX_EJECTION_MS", "300000",
            "Outlier detection: no ejection lasts longer", {1, {}},
            count_into(e.outliers.max_ejection));
  t.number("outlier-max-ejection-percent", "EPP_OUTLIER_MAX_EJECTION_PERCENT", "10",
           "Outlier detection: at most this share of the pool is ejected at once (always >= 1 "
           "pod)",
           {0, 100}, into(e.outliers.max_ejection_percent));
  t.number("panic-threshold-percent", "EPP_PANIC_THRESHOLD_PERCENT", "50",
           "Below this share of healthy pods (fresh metrics, not ejected) the EPP routes over "
           "every pod that ever answered a scrape instead of answering 503; 0 = never",
           {0, 100}, into(e.outliers.panic_threshold_percent));
  t.boolean("forward-priority", "EPP_FORWARD_PRIORITY", "true",
            "Forward a non-zero soft priority to the pod as vLLM's `priority` (lower = first; "
            "the pods need --scheduling-policy priority)",
            into(p.forward_priority));
  t.integer("max-body-bytes", "EPP_MAX_BODY_BYTES", "16777216", "Largest accepted request body",
            {1024, {}}, cast_into(p.body_limit));
  t.integer("body-budget-bytes", "EPP_BODY_BUDGET_BYTES", "268435456",
            "Request bodies held at once (503 + Retry-After beyond)", {1024, {}},
            cast_into(p.body_budget));
  t.integer("reload-check-ms", "EPP_RELOAD_CHECK_MS", "1000", "How often config files are checked",
            {10, {}}, count_into(e.reload_check));
  add_kubernetes_flags(t, e);
  t.number("decision-log-sample-rate", "EPP_DECISION_LOG_SAMPLE_RATE", "0",
           "Share of requests whose scheduling decision is logged (one 'decision {json}' line "
           "at info level: candidates, predictions, filters, scores, pick); the config file's "
           "decisionLog.sampleRate overrides it on every reload; 0 = off",
           {0, 1}, into(e.decision_log.sample_rate));
  t.number("decision-log-max-lines-per-second", "EPP_DECISION_LOG_MAX_LINES_PER_SECOND", "10",
           "Decision log line budget (sampled requests beyond it are counted, not logged)",
           {0.001, 1e6}, into(e.decision_log.max_lines_per_second));
  t.boolean("allow-debug-header", "EPP_ALLOW_DEBUG_HEADER", "false",
            "Answer a request that sends x-llmd-debug: 1 with its scheduling decision in the "
            "x-llmd-decision response header (shows pod names and load to clients: off by "
            "default)",
            into(p.allow_debug_header));
  t.text("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error",
         into(e.log_level));
}

}  // namespace

std::optional<EppOptions> parse_epp_options(int argc, char** argv) {
  config::Options options("epp", "Endpoint picker: predicted-latency router for LLM inference");
  const BuildInfo build = BuildInfo::of_this_build();
  options.add_version("epp " + build.build_ref + " (commit " + build.commit + ")");
  config::FlagTable table(options);
  EppOptions e;
  std::string health_host, metrics_host, ext_proc_host;
  add_flags(table, e, health_host, metrics_host, ext_proc_host);
  UpstreamFlagValues upstream;
  add_upstream_flags(table, e, upstream);
  if (!options.parse(argc, argv)) {
    return std::nullopt;
  }
  table.read();
  resolve_upstream_flags(table, e, upstream);
  e.health_host = health_host.empty() ? e.proxy.host : health_host;
  e.metrics_host = metrics_host.empty() ? e.proxy.host : metrics_host;
  e.ext_proc_host = ext_proc_host.empty() ? e.proxy.host : ext_proc_host;
  if (!e.prediction_server_url.empty()) {
    std::string error;
    auto urls = predictor_client::parse_replica_list(e.prediction_server_url, &error);
    if (!urls) {
      throw std::invalid_argument("--prediction-server-url / PREDICTION_SERVER_URL: " + error);
    }
    e.predictor.replica_urls = std::move(*urls);
  }
  if (e.in_process_predictions) {
    if (!e.prediction_server_url.empty()) {
      throw std::invalid_argument(
          "--in-process-predictions / IN_PROCESS_PREDICTIONS and --prediction-server-url / "
          "PREDICTION_SERVER_URL exclude each other: predict in the EPP or ask predictors");
    }
    if (!http::parse_url(e.feedback.trainer_url)) {
      throw std::invalid_argument(
          "--in-process-predictions / IN_PROCESS_PREDICTIONS needs --training-server-url / "
          "TRAINING_SERVER_URL (http://host:port): the models come from the trainer, got '" +
          e.feedback.trainer_url + "'");
    }
    e.in_process.trainer_url = e.feedback.trainer_url;
  }
  if (auto error = e.outliers.validate(); !error.empty()) {
    throw std::invalid_argument(error);
  }
  e.discovery.selector = discovery::parse_selector(e.pool_selector);
  return e;
}

}  // namespace llmd::epp
