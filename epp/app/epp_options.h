#pragma once
// Every EPP option, typed and grouped by the component it configures, parsed from the one flag
// table in epp_options.cc (flag > env > default; `epp --help` lists them). Values are checked
// while parsing: a bad one throws std::invalid_argument naming the flag and its env.
// Settings that depend on the machine (the leader's identity from the host name, the Lease's
// namespace from the service account) are left as given and resolved when the app starts.
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "epp/datastore/outlier_detection.h"
#include "epp/discovery/leader_elector.h"
#include "epp/discovery/pod_discovery.h"
#include "epp/feedback/training_feedback.h"
#include "epp/predictor_client/in_process_predictions.h"
#include "epp/predictor_client/predictor_client.h"
#include "epp/proxy/proxy_server.h"
#include "epp/scheduler/decision_log.h"

namespace llmd::epp {

struct EppOptions {
  std::string config_path;  // pool + pipeline YAML, re-read every reload_check
  std::string log_level;
  std::chrono::milliseconds reload_check{1000};

  // Proxy mode (host, port, limits, timeouts; not_serving and the upstream counters are left
  // for the app to set). proxy.host is also the address of every other listener whose own host
  // flag is empty; the hosts below are resolved, never empty.
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
  OutlierDetectionOptions outliers;  // validated
  DecisionLogConfig decision_log;    // the flags' settings; the file's decisionLog overrides

  // Kubernetes: discovery when a pool name or selector is given. The API server's address and
  // credentials (api_url, token_file, ca_file) serve leader election too.
  discovery::DiscoveryOptions discovery;
  std::string pool_selector;  // as given, for the start-up log
  bool discover() const { return !discovery.pool_name.empty() || !pool_selector.empty(); }
  bool leader_elect = false;
  // Durations checked; identity, lease name and namespace as given ("" = the defaults their
  // flags describe, see resolve_leader_election in epp_app.cc).
  discovery::LeaderElectionConfig leader_election;
};

// nullopt when --help was given (the help is printed). Throws std::invalid_argument on an
// unknown flag or a bad value.
std::optional<EppOptions> parse_epp_options(int argc, char** argv);

}  // namespace llmd::epp
