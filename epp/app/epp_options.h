#pragma once
// Every EPP option, typed and grouped by the component it configures, parsed from the one flag
// table in epp_options.cc (flag > env > default; `epp --help` lists them). Values are checked
// while parsing: a bad one throws std::invalid_argument naming the flag and its env.
// Settings that depend on the machine (the leader's identity from the host name, the Lease's
// namespace from the service account) are left as given and resolved when the app starts.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "epp/discovery/leader_elector.h"
#include "epp/discovery/pod_discovery.h"
#include "epp/feedback/training_feedback.h"
#include "epp/predictor_client/in_process_predictions.h"
#include "epp/predictor_client/predictor_client.h"
#include "epp/proxy/proxy_server.h"
#include "common/config/logging.h"

namespace llmd::epp {

// Settings that come from the Go EPP's command line (epp/app/upstream_flags.h) and have no
// home in a component's options. Each is honoured; what each maps onto:
// docs/coming-from-upstream.md.
struct UpstreamSettings {
  // Logging: JSON lines as controller-runtime's zap encoder (--zap-encoder json).
  config::LogFormat log_format;
  // ext_proc over TLS (--secure-serving): certificate and key from cert_path/tls.crt and
  // tls.key, or a self-signed pair made at start when cert_path is empty.
  bool secure_serving = false;
  std::string cert_path;
  bool cert_reload = false;     // re-read cert_path's files when they change
  std::string tls_min_version;  // "" (TLS 1.2), VersionTLS12 or VersionTLS13
  // /metrics needs a bearer token the API server accepts (TokenReview) and allows to get
  // /metrics (SubjectAccessReview), as controller-runtime's filter does.
  bool metrics_endpoint_auth = false;
  // Envoy's x-gateway-destination-endpoint-subset metadata narrows the candidates
  // (--disable-endpoint-subset-filter turns it off).
  bool endpoint_subset_filter = true;
  // ext_proc's largest message (--grpc-max-recv-msg-size); 0 = body limit + 64 KiB.
  std::size_t grpc_max_receive_bytes = 0;
  // Model-server scraping overrides (the legacy metric flags, the scrape path/scheme/port):
  // empty = the config file's data layer (default vLLM's names, http, /metrics).
  std::string metrics_scheme, metrics_path;
  uint16_t metrics_port = 0;  // 0 = the pod's serving port
  bool metrics_insecure_skip_verify = true;
  std::string queued_metric, running_metric, kv_usage_metric, lora_metric, cache_info_metric;
  // Scrape interval and staleness from --refresh-metrics-interval / --metrics-staleness-threshold
  // (set: they replace the config file's scrapeIntervalMs / stalenessMs, which must then be
  // absent).
  std::optional<std::chrono::milliseconds> scrape_interval, staleness;
};

struct EppOptions {
  std::string config_path;  // pool + pipeline YAML, checked for changes every second
  std::string log_level;
  UpstreamSettings upstream;

  // Proxy mode (host, port, limits; the timeouts and request defaults come from the config
  // file's startup settings, not_serving and the upstream counters are left for the app).
  // proxy.host is also the address of every other listener whose own host flag is empty; the hosts
  // below are resolved, never empty.
  ProxyOptions proxy;
  std::string health_host;
  uint16_t health_port = 9003;
  std::string metrics_host;
  uint16_t metrics_port = 9090;
  std::string ext_proc_host;
  uint16_t ext_proc_port = 0;  // gateway mode; 0 = off
  // SIGTERM -> requests in flight may take this long to finish.
  std::chrono::milliseconds drain_timeout{25000};

  // Predictions: predictor.replica_urls empty = off (composite scoring only).
  std::string prediction_server_url;  // as given, for the start-up log
  predictor_client::PredictorClientConfig predictor;
  // Instead of replicas: the trainer's models synced and evaluated in the EPP (then
  // prediction_server_url is empty and in_process.trainer_url is feedback.trainer_url).
  bool in_process_predictions = false;
  predictor_client::InProcessPredictionsConfig in_process;
  FeedbackOptions feedback;  // feedback.trainer_url empty = off

  // Kubernetes: discovery when a pool name or selector is given. The API server's address and
  // credentials (api_url, token_file, ca_file) serve leader election too.
  discovery::DiscoveryOptions discovery;
  std::string pool_selector;  // as given, for the start-up log
  bool discover() const { return !discovery.pool_name.empty() || !pool_selector.empty(); }
  bool leader_elect = false;
  // Identity, lease name and namespace as given ("" = the defaults their flags describe, see
  // resolve_leader_election in epp_app.cc); the durations come from the config file.
  discovery::LeaderElectionConfig leader_election;
};

// The --help section listing the flags that became config-file keys (each exits 2 if given).
inline constexpr const char* kMovedSection = "Moved to the config file (given: exit 2)";

// nullopt when --help was given (the help is printed). Throws std::invalid_argument on an
// unknown flag or a bad value.
std::optional<EppOptions> parse_epp_options(int argc, char** argv);

}  // namespace llmd::epp
