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
  discovery::LeaderElectionConfig& l = e.leader_election;  // durations: the config file's
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
  t.text("kube-ca-file", "EPP_KUBE_CA_FILE", "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
         "Kubernetes API (discovery, leader election): CA certificate of an https API server",
         into(d.ca_file));
  t.boolean("leader-elect", "EPP_LEADER_ELECT", "false",
            "Active-passive replicas: only the holder of a coordination.k8s.io/v1 Lease is ready "
            "and serves; the others stand by warm (pods, metrics, predictions) and answer 503",
            into(e.leader_elect));
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
    throw std::invalid_argument(
        "--drain-timeout / EPP_DRAIN_TIMEOUT_S: expected seconds or a "
        "duration such as 30s, at most 1h, got '" +
        v + "'");
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
  t.integer("io-threads", "EPP_IO_THREADS", "2",
            "Proxy workers: event loops of one thread each, connections spread over them", {1, 64},
            cast_into(p.io_threads));
  t.integer("max-body-bytes", "EPP_MAX_BODY_BYTES", "16777216", "Largest accepted request body",
            {1024, {}}, cast_into(p.body_limit));
  t.integer("body-budget-bytes", "EPP_BODY_BUDGET_BYTES", "268435456",
            "Request bodies held at once (503 + Retry-After beyond)", {1024, {}},
            cast_into(p.body_budget));
  add_kubernetes_flags(t, e);
  t.boolean("allow-debug-header", "EPP_ALLOW_DEBUG_HEADER", "false",
            "Answer a request that sends x-llmd-debug: 1 with its scheduling decision in the "
            "x-llmd-decision response header (shows pod names and load to clients: off by "
            "default)",
            into(p.allow_debug_header));
  t.text("log-level", "LOG_LEVEL", "info", "trace | debug | info | warn | error",
         into(e.log_level));
}

// Settings that were flags and now live in one place, the config file (tuning is not
// deployment): given as a flag or env, each exits 2 naming its new home, never ignored.
struct MovedFlag {
  const char* flag;
  const char* env;
  const char* home;  // where the setting lives now
};
constexpr MovedFlag kMovedFlags[] = {
    {"streaming-mode", "LATENCY_STREAMING_MODE",
     "`streamingMode` in the parameters of predicted-latency-producer (upstream's place)"},
    {"prediction-deadline-ms", "PREDICTION_DEADLINE_MS",
     "`predictionDeadlineMs` in the parameters of predicted-latency-producer"},
    {"prediction-based-scheduling", "PREDICTION_BASED_SCHEDULING",
     "`requests.predictionBasedScheduling` in the config file"},
    {"forward-priority", "EPP_FORWARD_PRIORITY", "`requests.forwardPriority` in the config file"},
    {"coalesce-window-us", "PREDICTION_COALESCE_WINDOW_US",
     "LATENCY_COALESCE_WINDOW_MS (the Go predictor client's variable, whole ms; default 1)"},
    {"coalesce-adaptive", "PREDICTION_COALESCE_ADAPTIVE",
     "nothing: a batch always leaves at once while none is in flight"},
    {"header-timeout-ms", "EPP_HEADER_TIMEOUT_MS", "`proxy.headerTimeoutMs` in the config file"},
    {"idle-timeout-ms", "EPP_IDLE_TIMEOUT_MS", "`proxy.idleTimeoutMs` in the config file"},
    {"upstream-first-byte-timeout-ms", "EPP_UPSTREAM_FIRST_BYTE_TIMEOUT_MS",
     "`proxy.upstreamFirstByteTimeoutMs` in the config file"},
    {"outlier-consecutive-failures", "EPP_OUTLIER_CONSECUTIVE_FAILURES",
     "`outlierDetection.consecutiveFailures` in the config file"},
    {"outlier-base-ejection-ms", "EPP_OUTLIER_BASE_EJECTION_MS",
     "`outlierDetection.baseEjectionMs` in the config file"},
    {"outlier-max-ejection-ms", "EPP_OUTLIER_MAX_EJECTION_MS",
     "`outlierDetection.maxEjectionMs` in the config file"},
    {"outlier-max-ejection-percent", "EPP_OUTLIER_MAX_EJECTION_PERCENT",
     "`outlierDetection.maxEjectionPercent` in the config file"},
    {"panic-threshold-percent", "EPP_PANIC_THRESHOLD_PERCENT",
     "`outlierDetection.panicThresholdPercent` in the config file"},
    {"reload-check-ms", "EPP_RELOAD_CHECK_MS", "nothing: config files are checked every second"},
    {"decision-log-sample-rate", "EPP_DECISION_LOG_SAMPLE_RATE",
     "`decisionLog.sampleRate` in the config file (re-read on every reload)"},
    {"decision-log-max-lines-per-second", "EPP_DECISION_LOG_MAX_LINES_PER_SECOND",
     "`decisionLog.maxLinesPerSecond` in the config file"},
    {"leader-elect-lease-duration", "EPP_LEADER_ELECT_LEASE_DURATION_S",
     "`leaderElection.leaseDurationSeconds` in the config file"},
    {"leader-elect-renew-deadline", "EPP_LEADER_ELECT_RENEW_DEADLINE_S",
     "`leaderElection.renewDeadlineSeconds` in the config file"},
    {"leader-elect-retry-period", "EPP_LEADER_ELECT_RETRY_PERIOD_S",
     "`leaderElection.retryPeriodSeconds` in the config file"},
};

void add_moved_flags(config::FlagTable& t) {
  t.section(kMovedSection);
  for (const MovedFlag& m : kMovedFlags) {
    t.text(m.flag, m.env, "", std::string("Now ") + m.home, [m](const std::string& v) {
      if (!v.empty()) {
        throw std::invalid_argument(std::string("--") + m.flag + " / " + m.env +
                                    " is no longer a flag: set " + m.home + " (got '" + v + "')");
      }
    });
  }
  t.section("");
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
  add_moved_flags(table);
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
  e.discovery.selector = discovery::parse_selector(e.pool_selector);
  return e;
}

}  // namespace llmd::epp
