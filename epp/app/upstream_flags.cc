#include "epp/app/upstream_flags.h"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "epp/app/epp_options.h"

namespace llmd::epp {

using config::into;

namespace {

constexpr char kSection[] = "Upstream (GIE / llm-d) flags";

// Go's flag syntax keeps quotes a YAML plain scalar carried (`--x="a:b"` arrives as "a:b" with
// its quotes); the metric names never contain them.
std::string unquote(std::string v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') {
    return v.substr(1, v.size() - 2);
  }
  return v;
}

// zap's level names, or a verbosity number as -v takes it, onto ours.
std::string level_of_verbosity(int64_t v) {
  if (v >= 5) {
    return "trace";
  }
  return v >= 3 ? "debug" : "info";
}

std::string level_of_zap(const std::string& zap) {
  if (zap == "debug" || zap == "info" || zap == "warn" || zap == "error") {
    return zap;
  }
  if (zap == "dpanic" || zap == "panic" || zap == "fatal") {
    return "critical";
  }
  char* end = nullptr;
  const long n = std::strtol(zap.c_str(), &end, 10);
  if (!zap.empty() && end != nullptr && *end == '\0' && n > 0) {
    return level_of_verbosity(n);
  }
  throw std::invalid_argument(
      "--zap-log-level: expected debug, info, warn, error, dpanic, "
      "panic, fatal or an integer > 0, got '" +
      zap + "'");
}

std::vector<uint16_t> parse_ports(const std::string& text) {
  std::vector<uint16_t> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string part = text.substr(start, comma - start);
    char* end = nullptr;
    const long port = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || port < 1 || port > 65535) {
      throw std::invalid_argument("--endpoint-target-ports: '" + part +
                                  "' is not a port (1-65535); expected e.g. 8000,8001");
    }
    if (std::find(out.begin(), out.end(), port) == out.end()) {
      out.push_back(static_cast<uint16_t>(port));  // duplicates dropped, as upstream
    }
    if (comma == std::string::npos) {
      break;
    }
    start = comma + 1;
  }
  if (out.empty() || out.size() > 8) {
    throw std::invalid_argument("--endpoint-target-ports: 1 to 8 ports, got " +
                                std::to_string(out.size()));
  }
  return out;
}

// Upstream's --config-text is the document itself; our loader (and its reloader) read a file.
std::string write_config_text(const std::string& text) {
  const char* tmp = std::getenv("TMPDIR");
  std::string path =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/epp-config-text-XXXXXX.yaml";
  const int fd = mkstemps(path.data(), 5);
  if (fd < 0) {
    throw std::invalid_argument("--config-text: cannot write it to " + path);
  }
  ::close(fd);
  std::ofstream out(path);
  out << text;
  if (!out.flush()) {
    throw std::invalid_argument("--config-text: cannot write it to " + path);
  }
  return path;
}

void refuse_if(bool condition, const std::string& message) {
  if (condition) {
    throw std::invalid_argument(message);
  }
}

// An upstream env variable holding a whole number in [min, max]; nullopt when unset or empty.
std::optional<int64_t> env_integer(const char* name, int64_t min, int64_t max) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    return std::nullopt;
  }
  char* end = nullptr;
  errno = 0;
  const long long n = std::strtoll(v, &end, 10);
  if (*end != '\0' || errno != 0 || n < min || n > max) {
    throw std::invalid_argument(std::string(name) + ": expected a whole number in [" +
                                std::to_string(min) + ", " + std::to_string(max) + "], got '" + v +
                                "'");
  }
  return n;
}

// The Go latency-predictor client's env (GIE sidecars/latencypredictorasync/types.go), which
// the charts set on the EPP container: each onto our predictor client or feedback, or checked
// and documented where ours needs no such setting.
void read_predictor_client_env(EppOptions& e) {
  if (auto ms = env_integer("LATENCY_COALESCE_WINDOW_MS", 0, 1000)) {
    e.predictor.coalesce_window = std::chrono::microseconds(*ms * 1000);
  }
  if (auto n = env_integer("LATENCY_MAX_CONCURRENT_DISPATCHES", 1, 100000)) {
    e.predictor.max_concurrent_dispatches = static_cast<std::size_t>(*n);
  }
  if (auto n = env_integer("LATENCY_MAX_COALESCED_ROWS", 0, 10000)) {
    e.predictor.max_coalesced_rows = *n == 0 ? 10000 : static_cast<std::size_t>(*n);
  }
  if (auto n = env_integer("LATENCY_MAX_SAMPLE_SIZE", 1, 10000000)) {
    e.feedback.max_per_flush = static_cast<std::size_t>(*n);
  }
  if (auto n = env_integer("LATENCY_FLUSH_INTERVAL_SEC", 1, 3600)) {
    e.feedback.interval = std::chrono::seconds(*n);
  }
  if (auto n = env_integer("LATENCY_HTTP_TIMEOUT_SEC", 1, 3600)) {
    e.feedback.send_timeout = std::chrono::seconds(*n);
  }
  // Checked, with no setting of ours behind them: a caller's candidates always go in one
  // batch (up to the predictor's 10,000 rows), and the models are the predictors' to sync.
  env_integer("LATENCY_MAX_BULK_SIZE", 1, 100);
  env_integer("LATENCY_METRICS_INTERVAL_SEC", 1, 86400);
  if (const char* v = std::getenv("LATENCY_USE_NATIVE_XGBOOST"); v != nullptr && *v != '\0') {
    const std::string s = v;
    refuse_if(
        s != "true" && s != "false" && s != "TRUE" && s != "FALSE" && s != "True" && s != "False",
        "LATENCY_USE_NATIVE_XGBOOST: expected true or false, got '" + s + "'");
  }
}

}  // namespace

std::optional<std::size_t> parse_byte_size(const std::string& text) {
  std::size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) {
    ++i;
  }
  if (i == 0 || i > 15) {
    return std::nullopt;
  }
  const std::size_t n = std::stoull(text.substr(0, i));
  static const std::pair<const char*, std::size_t> kSuffixes[] = {{"", 1},
                                                                  {"B", 1},
                                                                  {"K", 1000},
                                                                  {"KB", 1000},
                                                                  {"Ki", 1024},
                                                                  {"KiB", 1024},
                                                                  {"M", 1000000},
                                                                  {"MB", 1000000},
                                                                  {"Mi", 1048576},
                                                                  {"MiB", 1048576},
                                                                  {"G", 1000000000},
                                                                  {"GB", 1000000000},
                                                                  {"Gi", 1073741824},
                                                                  {"GiB", 1073741824}};
  const std::string suffix = text.substr(i);
  for (const auto& [name, scale] : kSuffixes) {
    if (suffix == name) {
      return n * scale;
    }
  }
  return std::nullopt;
}

void add_upstream_flags(config::FlagTable& t, EppOptions& e, UpstreamFlagValues& raw) {
  UpstreamSettings& u = e.upstream;
  t.section(kSection);
  t.alias("config-file", "config", "The configuration file");
  t.text("config-text", "", "",
         "The configuration as text instead of a file (excludes --config / --config-file)",
         into(raw.config_text));
  t.alias("grpc-port", "ext-proc-port", "gRPC port for Envoy's ext_proc");
  t.alias("grpc-health-port", "health-port",
          "Port of the gRPC health service (liveness, readiness, inference-extension, ''); it "
          "answers HTTP /healthz and /readyz too");
  t.alias("ha-enable-leader-election", "leader-elect",
          "Active-passive replicas; gRPC readiness passes only on the leader", true);
  t.alias("endpoint-selector", "pool-selector",
          "Pods without an InferencePool: labels k=v[,k2=v2]");
  t.text("endpoint-target-ports", "", "",
         "With --endpoint-selector: the pods' serving ports, 1-8 (e.g. 8000,8001; one endpoint "
         "per pod and port)",
         into(raw.target_ports));
  t.text("pool-group", "", "",
         "API group of the InferencePool: inference.networking.k8s.io (v1) or "
         "inference.networking.x-k8s.io (v1alpha2); empty: v1, else v1alpha2",
         into(raw.pool_group));
  t.go_boolean("disable-endpoint-subset-filter", "", "false",
               "Ignore Envoy's x-gateway-destination-endpoint-subset metadata",
               into(raw.disable_subset_filter));
  t.text("zap-encoder", "", "console", "Log format: console (text lines) or json",
         into(raw.zap_encoder));
  t.text("zap-log-level", "", "",
         "Log level: debug, info, warn, error, or a verbosity number as -v (over -v)",
         into(raw.zap_log_level));
  t.integer("v,verbosity", "", "2",
            "Log verbosity as the Go EPP's -v: <= 2 info, 3-4 debug, >= 5 trace", {0, 100},
            config::cast_into(raw.verbosity));
  t.go_boolean("zap-devel", "", "true",
               "Accepted (development defaults of zap: nothing here depends on it)", [](bool) {});
  t.text("zap-stacktrace-level", "", "",
         "Accepted and checked (info, error, panic); C++ logs carry no stack traces",
         into(raw.zap_stacktrace_level));
  t.text("zap-time-encoding", "", "",
         "JSON logs' ts: iso8601 (default), rfc3339, rfc3339nano, epoch, millis, nano",
         into(raw.zap_time_encoding));
  t.go_boolean("tracing", "", "false",
               "OpenTelemetry traces: not available in this build (Debian 12 has no "
               "OpenTelemetry C++ SDK); true is logged as a warning",
               into(raw.tracing));
  t.go_boolean("health-checking", "", "false",
               "Accepted: the ext_proc port always serves gRPC health", [](bool) {});
  t.go_boolean("enable-pprof", "", "true",
               "Accepted: Go's pprof does not exist here (profile with perf)", [](bool) {});
  t.go_boolean("secure-serving", "EPP_SECURE_SERVING", "false",
               "ext_proc over TLS (h2 by ALPN) with --cert-path, else a self-signed certificate",
               into(u.secure_serving));
  t.text("cert-path", "", "",
         "Directory holding tls.crt and tls.key for --secure-serving (empty: self-signed)",
         into(u.cert_path));
  t.go_boolean("enable-cert-reload", "", "false", "Re-read --cert-path's files when they change",
               into(u.cert_reload));
  t.text("tls-min-version", "", "",
         "Lowest TLS version for --secure-serving: VersionTLS12 or VersionTLS13",
         into(raw.tls_min_version));
  t.text("tls-cipher-suites", "", "", "Not supported: OpenSSL's defaults are used",
         into(raw.tls_cipher_suites));
  t.go_boolean("metrics-endpoint-auth", "EPP_METRICS_ENDPOINT_AUTH", "false",
               "Require a Kubernetes bearer token on /metrics (TokenReview and "
               "SubjectAccessReview)",
               into(u.metrics_endpoint_auth));
  t.text("metrics-client-ca-file", "", "", "Not supported: /metrics is served without TLS",
         into(raw.metrics_client_ca));
  t.text("metrics-cert-dir", "", "", "Not supported: /metrics is served without TLS",
         into(raw.metrics_cert_dir));
  t.go_boolean("emit-endpoint-scores", "", "false",
               "Not supported: per-endpoint scores are in the decision log and header instead",
               into(raw.emit_endpoint_scores));
  t.go_boolean("enable-grpc-stream-metrics", "", "false",
               "Accepted: llmd_epp_requests_in_progress{ingress=\"ext_proc\"} is always exported",
               [](bool) {});
  t.go_boolean("allow-experimental-plugins", "", "false", "Accepted: no plugin here is gated",
               [](bool) {});
  t.text("grpc-max-recv-msg-size", "", "",
         "Largest ext_proc message (e.g. 10MiB, 25MB; empty: --max-body-bytes + 64 KiB)",
         into(raw.grpc_max_recv));
  t.text("grpc-max-send-msg-size", "", "",
         "Checked; the EPP's ext_proc answers are headers and small bodies, far below any limit",
         into(raw.grpc_max_send));
  t.text("model-server-metrics-scheme", "", "", "Scrape scheme: http or https",
         into(u.metrics_scheme));
  t.text("model-server-metrics-path", "", "", "Scrape path (default /metrics)",
         into(u.metrics_path));
  t.integer("model-server-metrics-port", "", "0", "Scrape port (0: the pod's serving port)",
            {0, 65535}, config::cast_into(u.metrics_port));
  t.go_boolean("model-server-metrics-https-insecure-skip-verify", "", "true",
               "With https: do not verify the pods' certificates",
               into(u.metrics_insecure_skip_verify));
  t.duration("refresh-metrics-interval", "", "50ms",
             "Scrape interval (replaces the config file's scrapeIntervalMs)",
             {std::chrono::milliseconds(1), {}},
             [&raw](std::chrono::milliseconds d) { raw.refresh_interval = d; });
  t.duration("metrics-staleness-threshold", "", "2s",
             "Pods whose metrics are older are not candidates (replaces stalenessMs)",
             {std::chrono::milliseconds(1), {}},
             [&raw](std::chrono::milliseconds d) { raw.staleness = d; });
  t.duration("refresh-prometheus-metrics-interval", "", "5s",
             "Accepted: the EPP's pool gauges are computed at each scrape",
             {std::chrono::milliseconds(1), {}}, [](std::chrono::milliseconds) {});
  t.text("total-queued-requests-metric", "", "", "Engine metric: requests waiting",
         [&u](std::string v) { u.queued_metric = unquote(std::move(v)); });
  t.text("total-running-requests-metric", "", "", "Engine metric: requests running",
         [&u](std::string v) { u.running_metric = unquote(std::move(v)); });
  t.text("kv-cache-usage-percentage-metric", "", "", "Engine metric: KV-cache use (0-1)",
         [&u](std::string v) { u.kv_usage_metric = unquote(std::move(v)); });
  t.text("lora-info-metric", "", "", "Engine metric: LoRA adapters (\"\" = none)",
         [&u](std::string v) { u.lora_metric = unquote(std::move(v)); });
  t.text("cache-info-metric", "", "", "Engine metric: cache configuration",
         [&u](std::string v) { u.cache_info_metric = unquote(std::move(v)); });
  t.section("");
}

void resolve_upstream_flags(const config::FlagTable& t, EppOptions& e,
                            const UpstreamFlagValues& raw) {
  UpstreamSettings& u = e.upstream;
  // Logging: one level, three spellings (ours, zap's, -v).
  const bool zap_level = t.given("zap-log-level"), verbosity = t.given("verbosity");
  refuse_if(t.given("log-level") && (zap_level || verbosity),
            "--log-level / LOG_LEVEL and --zap-log-level / -v set the same level: give one");
  if (zap_level) {
    e.log_level = level_of_zap(raw.zap_log_level);
  } else if (verbosity) {
    e.log_level = level_of_verbosity(raw.verbosity);
  }
  refuse_if(raw.zap_encoder != "console" && raw.zap_encoder != "json",
            "--zap-encoder: expected json or console, got '" + raw.zap_encoder + "'");
  u.log_format.json = raw.zap_encoder == "json";
  if (!raw.zap_time_encoding.empty()) {
    u.log_format.time_encoding = raw.zap_time_encoding;
  }
  static const std::set<std::string> kStackLevels = {"",      "debug",  "info",  "warn",
                                                     "error", "dpanic", "panic", "fatal"};
  refuse_if(kStackLevels.count(raw.zap_stacktrace_level) == 0,
            "--zap-stacktrace-level: expected info, error or panic, got '" +
                raw.zap_stacktrace_level + "'");
  if (raw.tracing) {
    spdlog::warn(
        "--tracing=true: this EPP exports no OpenTelemetry traces (no OpenTelemetry C++ "
        "SDK in Debian 12); requests are traced by the decision log and header instead");
  }

  read_predictor_client_env(e);

  // Configuration.
  if (!raw.config_text.empty()) {
    refuse_if(t.given("config"), "--config-text and --config / --config-file exclude each other");
    e.config_path = write_config_text(raw.config_text);
  }

  // Discovery.
  refuse_if(!raw.pool_group.empty() && raw.pool_group != discovery::kPoolGroupV1 &&
                raw.pool_group != discovery::kPoolGroupV1Alpha2,
            "--pool-group: expected inference.networking.k8s.io or "
            "inference.networking.x-k8s.io, got '" +
                raw.pool_group + "'");
  e.discovery.pool_group = raw.pool_group;
  if (!raw.target_ports.empty()) {
    refuse_if(t.given("target-port"),
              "--endpoint-target-ports and --target-port / EPP_TARGET_PORT name the same "
              "ports: give one");
    e.discovery.target_ports = parse_ports(raw.target_ports);
    e.discovery.target_port = e.discovery.target_ports.front();
  }
  refuse_if(!e.discovery.pool_name.empty() && !e.pool_selector.empty(),
            "--pool-name and --endpoint-selector / --pool-selector exclude each other: an "
            "InferencePool or a label selector");
  u.endpoint_subset_filter = !raw.disable_subset_filter;

  // Scraping.
  refuse_if(
      !u.metrics_scheme.empty() && u.metrics_scheme != "http" && u.metrics_scheme != "https",
      "--model-server-metrics-scheme: expected http or https, got '" + u.metrics_scheme + "'");
  if (t.given("refresh-metrics-interval")) {
    u.scrape_interval = raw.refresh_interval;
  }
  if (t.given("metrics-staleness-threshold")) {
    u.staleness = raw.staleness;
  }

  // Serving.
  static const std::set<std::string> kTlsVersions = {"", "VersionTLS12", "VersionTLS13"};
  refuse_if(kTlsVersions.count(raw.tls_min_version) == 0,
            "--tls-min-version: expected VersionTLS12 or VersionTLS13, got '" +
                raw.tls_min_version + "'");
  u.tls_min_version = raw.tls_min_version;
  refuse_if(!raw.tls_cipher_suites.empty(),
            "--tls-cipher-suites is not supported: the EPP uses OpenSSL's default suites (TLS "
            "1.3's are not configurable in Go either); remove the flag");
  refuse_if(!raw.metrics_client_ca.empty() || !raw.metrics_cert_dir.empty(),
            "--metrics-client-ca-file / --metrics-cert-dir are not supported: /metrics is served "
            "over plain HTTP (use --metrics-endpoint-auth for bearer-token access)");
  refuse_if(
      raw.emit_endpoint_scores,
      "--emit-endpoint-scores=true is not supported: the per-endpoint scores are in the "
      "decision log (decisionLog.sampleRate in the config file) and the x-llmd-decision header "
      "(--allow-debug-header), not in Envoy's dynamic metadata");
  if (!raw.grpc_max_recv.empty()) {
    auto bytes = parse_byte_size(raw.grpc_max_recv);
    refuse_if(!bytes || *bytes < 1024,
              "--grpc-max-recv-msg-size: expected a size of at least 1Ki such as 10MiB or "
              "25MB, got '" +
                  raw.grpc_max_recv + "'");
    u.grpc_max_receive_bytes = *bytes;
  }
  refuse_if(!raw.grpc_max_send.empty() && !parse_byte_size(raw.grpc_max_send),
            "--grpc-max-send-msg-size: expected a size such as 10MiB or 25MB, got '" +
                raw.grpc_max_send + "'");
}

}  // namespace llmd::epp
