#include "epp/config/startup_settings.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iomanip>
#include <limits>
#include <map>
#include <sstream>
#include <stdexcept>

namespace llmd::epp {
namespace {

using std::chrono::milliseconds;

enum class Kind { kBool, kNumber };

// One row: the key, its documentation and where its value goes. Numbers are checked against
// [min, max] (and to be whole when `whole`).
struct Row {
  StartupKey key;
  Kind kind;
  double min = 0, max = 0;
  bool whole = true;
  std::function<void(StartupSettings&, double)> set;
};

constexpr double kNoMax = std::numeric_limits<double>::max();

auto ms_into(milliseconds StartupSettings::*field) {
  return
      [field](StartupSettings& s, double v) { s.*field = milliseconds(static_cast<int64_t>(v)); };
}
auto seconds_into(milliseconds StartupSettings::*field) {
  return [field](StartupSettings& s, double v) {
    s.*field = milliseconds(static_cast<int64_t>(std::llround(v * 1000)));
  };
}
auto flag_into(bool StartupSettings::*field) {
  return [field](StartupSettings& s, double v) { s.*field = v != 0; };
}

const std::vector<Row>& rows() {
  static const std::vector<Row> table = {
      {{"scrapeIntervalMs", "50",
        "How often each pod's /metrics is read; the load the picker sees is this old at most"},
       Kind::kNumber,
       1,
       3600000,
       true,
       ms_into(&StartupSettings::scrape_interval)},
      {{"stalenessMs", "2000",
        "Pods whose last good scrape is older are not candidates (a pod that stopped answering "
        "leaves the pool after this long)"},
       Kind::kNumber,
       1,
       3600000,
       true,
       ms_into(&StartupSettings::staleness)},
      {{"requests.predictionBasedScheduling", "true",
        "Default of the x-prediction-based-scheduling header: rank pods by predicted latency "
        "(false: by the load+prefix composite) when a request does not say"},
       Kind::kBool,
       0,
       0,
       true,
       flag_into(&StartupSettings::prediction_based_scheduling)},
      {{"requests.forwardPriority", "true",
        "Forward a request's non-zero soft priority to the pod as vLLM's `priority` (lower = "
        "first; the pods need --scheduling-policy priority)"},
       Kind::kBool,
       0,
       0,
       true,
       flag_into(&StartupSettings::forward_priority)},
      {{"proxy.headerTimeoutMs", "10000",
        "Time a client has to send a request's headers once it started (slow-loris bound)"},
       Kind::kNumber,
       1,
       3600000,
       true,
       ms_into(&StartupSettings::header_timeout)},
      {{"proxy.idleTimeoutMs", "60000",
        "Keep-alive idle time between requests, and the bound of a body upload"},
       Kind::kNumber,
       1,
       86400000,
       true,
       ms_into(&StartupSettings::idle_timeout)},
      {{"proxy.upstreamFirstByteTimeoutMs", "30000",
        "A pod that sends no response header within this is treated as failed (502 to the "
        "client, a failure for outlier detection); above the longest prefill you serve"},
       Kind::kNumber,
       10,
       kNoMax,
       true,
       ms_into(&StartupSettings::upstream_first_byte_timeout)},
      {{"outlierDetection.consecutiveFailures", "5",
        "A pod whose requests fail this many times in a row (connect error, timeout, 5xx, "
        "broken stream) is ejected; 0 = never (Envoy's consecutive_5xx)"},
       Kind::kNumber,
       0,
       1000,
       true,
       [](StartupSettings& s, double v) { s.outliers.consecutive_failures = static_cast<int>(v); }},
      {{"outlierDetection.baseEjectionMs", "30000",
        "The first ejection's length; the n-th lasts n times as long (Envoy's "
        "base_ejection_time)"},
       Kind::kNumber,
       1,
       kNoMax,
       true,
       [](StartupSettings& s, double v) {
         s.outliers.base_ejection = milliseconds(static_cast<int64_t>(v));
       }},
      {{"outlierDetection.maxEjectionMs", "300000",
        "No ejection lasts longer (Envoy's max_ejection_time)"},
       Kind::kNumber,
       1,
       kNoMax,
       true,
       [](StartupSettings& s, double v) {
         s.outliers.max_ejection = milliseconds(static_cast<int64_t>(v));
       }},
      {{"outlierDetection.maxEjectionPercent", "10",
        "At most this share of the pool is ejected at once, always at least one pod (Envoy's "
        "max_ejection_percent)"},
       Kind::kNumber,
       0,
       100,
       false,
       [](StartupSettings& s, double v) { s.outliers.max_ejection_percent = v; }},
      {{"outlierDetection.panicThresholdPercent", "50",
        "Below this share of healthy pods (fresh metrics, not ejected) the EPP routes over every "
        "pod that ever answered a scrape instead of answering 503; 0 = never (Envoy's "
        "healthy_panic_threshold)"},
       Kind::kNumber,
       0,
       100,
       false,
       [](StartupSettings& s, double v) { s.outliers.panic_threshold_percent = v; }},
      {{"extProc.idleTimeoutMs", "3600000",
        "A gateway connection with no open stream this long gets GOAWAY and is closed (Envoy's "
        "HTTP/2 idle_timeout and its default, 1 h); 0 = never"},
       Kind::kNumber,
       0,
       86400000,
       true,
       ms_into(&StartupSettings::ext_proc_idle_timeout)},
      {{"extProc.streamIdleTimeoutMs", "300000",
        "A gateway stream with no frame either way this long is reset (Envoy's "
        "stream_idle_timeout); above the longest response you stream; 0 = never"},
       Kind::kNumber,
       0,
       86400000,
       true,
       ms_into(&StartupSettings::ext_proc_stream_idle_timeout)},
      {{"extProc.maxConnectionAgeMs", "0",
        "A gateway connection this old gets GOAWAY; its streams finish (Envoy's "
        "max_connection_duration); 0 = no limit"},
       Kind::kNumber,
       0,
       kNoMax,
       true,
       ms_into(&StartupSettings::ext_proc_max_connection_age)},
      {{"extProc.maxConnectionAgeGraceMs", "300000",
        "After that GOAWAY, streams still open this long are cancelled and the connection closed"},
       Kind::kNumber,
       0,
       kNoMax,
       true,
       ms_into(&StartupSettings::ext_proc_max_connection_age_grace)},
      {{"extProc.keepaliveIntervalMs", "7200000",
        "A gateway connection silent this long gets a PING (grpc-go's server default, "
        "upstream's: 2 h); 0 = never"},
       Kind::kNumber,
       0,
       kNoMax,
       true,
       ms_into(&StartupSettings::ext_proc_keepalive_interval)},
      {{"extProc.keepaliveTimeoutMs", "20000",
        "No byte back within this after that PING closes the connection (a gateway gone without "
        "closing it)"},
       Kind::kNumber,
       1,
       kNoMax,
       true,
       ms_into(&StartupSettings::ext_proc_keepalive_timeout)},
      {{"extProc.maxHeaderListBytes", "65536",
        "SETTINGS_MAX_HEADER_LIST_SIZE advertised on the ext_proc port and enforced per header "
        "block (name + value + 32 per field): a larger block resets its stream"},
       Kind::kNumber,
       1024,
       16777216,
       true,
       [](StartupSettings& s, double v) {
         s.ext_proc_max_header_list_bytes = static_cast<uint32_t>(v);
       }},
      {{"extProc.connectionBudgetShare", "1",
        "The share of the body budget one gateway connection may hold in messages being "
        "received (never less than one message); below 1 when several gateways share the EPP "
        "and one must not starve the others (a gateway multiplexes its requests on a few "
        "connections, so a share also caps its own large prompts)"},
       Kind::kNumber,
       0.01,
       1,
       false,
       [](StartupSettings& s, double v) { s.ext_proc_connection_budget_share = v; }},
      {{"extProc.streamBufferBytes", "4194304",
        "A gateway stream whose responses have more than this waiting unread gets no more of "
        "its request (its HTTP/2 window stays shut) until half has gone (Envoy's watermark)"},
       Kind::kNumber,
       65536,
       1073741824,
       true,
       [](StartupSettings& s, double v) {
         s.ext_proc_stream_buffer_bytes = static_cast<std::size_t>(v);
       }},
      {{"extProc.connectionBufferBytes", "16777216",
        "The same for all the streams of one gateway connection together: over it, no stream "
        "of the connection gets more request bytes until half has gone"},
       Kind::kNumber,
       65536,
       4294967296,
       true,
       [](StartupSettings& s, double v) {
         s.ext_proc_connection_buffer_bytes = static_cast<std::size_t>(v);
       }},
      {{"extProc.maxConnections", "0",
        "Gateway connections open at once (at the cap new ones wait in the backlog); 0 = half "
        "the descriptors the EPP may give to connections, so the gateway port cannot starve "
        "the proxy port"},
       Kind::kNumber,
       0,
       1048576,
       true,
       [](StartupSettings& s, double v) {
         s.ext_proc_max_connections = static_cast<std::size_t>(v);
       }},
      {{"leaderElection.leaseDurationSeconds", "15",
        "With --leader-elect: whole seconds a Lease stays valid without renewal (a standby takes "
        "over after this long)"},
       Kind::kNumber,
       1,
       3600,
       true,
       [](StartupSettings& s, double v) {
         s.lease_duration = std::chrono::seconds(static_cast<int64_t>(v));
       }},
      {{"leaderElection.renewDeadlineSeconds", "10",
        "With --leader-elect: seconds a leader may fail to renew before it stops serving (below "
        "the lease duration)"},
       Kind::kNumber,
       0.001,
       3600,
       false,
       seconds_into(&StartupSettings::renew_deadline)},
      {{"leaderElection.retryPeriodSeconds", "2",
        "With --leader-elect: seconds between renewals (leader) or attempts to acquire "
        "(standby)"},
       Kind::kNumber,
       0.001,
       3600,
       false,
       seconds_into(&StartupSettings::retry_period)},
      {{"discovery.watchTimeoutSeconds", "300",
        "With --pool-name or --pool-selector: timeoutSeconds of each watch of the API server "
        "(pods, InferencePool, InferenceObjectives); one that sends nothing, not even a "
        "bookmark, for 5 s longer is abandoned and listed again, so an edit behind a dead "
        "connection is followed within this + 5 s"},
       Kind::kNumber,
       1,
       3600,
       true,
       [](StartupSettings& s, double v) {
         s.watch_timeout = std::chrono::seconds(static_cast<int64_t>(v));
       }},
  };
  return table;
}

std::string section_of(std::string_view path) {
  const auto dot = path.find('.');
  return std::string(dot == std::string_view::npos ? path : path.substr(0, dot));
}

std::string at_line(const YAML::Node& n) {
  return n.Mark().is_null() ? "" : "line " + std::to_string(n.Mark().line + 1) + ": ";
}

std::string format(double v) {
  std::ostringstream o;
  o << std::setprecision(15) << v;
  return o.str();
}

double read_value(const Row& row, const YAML::Node& value) {
  const std::string where = at_line(value) + std::string(row.key.path);
  if (!value.IsScalar()) {
    throw std::runtime_error(where + ": expected a scalar");
  }
  if (row.kind == Kind::kBool) {
    bool b = false;
    if (!YAML::convert<bool>::decode(value, b)) {
      throw std::runtime_error(where + ": expected true or false, got '" + value.Scalar() + "'");
    }
    return b ? 1 : 0;
  }
  double v = 0;
  if (!YAML::convert<double>::decode(value, v) || !std::isfinite(v)) {
    throw std::runtime_error(where + ": expected a number, got '" + value.Scalar() + "'");
  }
  if (row.whole && v != std::floor(v)) {
    throw std::runtime_error(where + ": expected a whole number, got '" + value.Scalar() + "'");
  }
  if (v < row.min || v > row.max) {
    throw std::runtime_error(where + ": " + value.Scalar() + " is out of range [" +
                             format(row.min) + ", " +
                             (row.max == kNoMax ? std::string("...") : format(row.max)) + "]");
  }
  return v;
}

}  // namespace

const std::vector<StartupKey>& startup_keys() {
  static const std::vector<StartupKey> keys = [] {
    std::vector<StartupKey> out;
    for (const Row& r : rows()) {
      out.push_back(r.key);
    }
    return out;
  }();
  return keys;
}

bool is_startup_key(std::string_view top_level_key) {
  return std::any_of(rows().begin(), rows().end(),
                     [&](const Row& r) { return section_of(r.key.path) == top_level_key; });
}

StartupSettings read_startup_settings(const YAML::Node& root) {
  std::map<std::string, YAML::Node> given;  // path -> value node
  for (const auto& kv : root) {
    const std::string top = kv.first.as<std::string>();
    if (!is_startup_key(top)) {
      continue;
    }
    const bool is_section =
        std::none_of(rows().begin(), rows().end(), [&](const Row& r) { return r.key.path == top; });
    if (!is_section) {
      given[top] = kv.second;
      continue;
    }
    if (!kv.second.IsMap()) {
      throw std::runtime_error(at_line(kv.second) + top + " must be a mapping");
    }
    for (const auto& entry : kv.second) {
      const std::string path = top + "." + entry.first.as<std::string>();
      if (std::none_of(rows().begin(), rows().end(),
                       [&](const Row& r) { return r.key.path == path; })) {
        std::string known;
        for (const Row& r : rows()) {
          if (section_of(r.key.path) == top) {
            known += (known.empty() ? "" : ", ") + std::string(r.key.path.substr(top.size() + 1));
          }
        }
        throw std::runtime_error(at_line(entry.first) + top + ": unknown key '" +
                                 entry.first.as<std::string>() + "' (known: " + known + ")");
      }
      given[path] = entry.second;
    }
  }
  // Every row is set, from the file or from its documented default, so the defaults the
  // reference prints are the ones in force.
  StartupSettings s;
  for (const Row& r : rows()) {
    const std::string path(r.key.path);
    auto it = given.find(path);
    const double v = read_value(
        r, it != given.end() ? it->second : YAML::Node(std::string(r.key.default_value)));
    r.set(s, v);
    s.as_read[path] = v;
  }
  if (auto error = s.outliers.validate(); !error.empty()) {
    throw std::runtime_error("outlierDetection: " + error);
  }
  // The leader-election durations are checked against each other where they are used
  // (LeaderElectionConfig::validate), with --leader-elect only.
  return s;
}

std::string changed_startup_keys(const StartupSettings& before, const StartupSettings& after) {
  std::string changed;
  for (const Row& r : rows()) {
    const std::string path(r.key.path);
    if (before.as_read.at(path) != after.as_read.at(path)) {
      changed += (changed.empty() ? "" : ", ") + path;
    }
  }
  return changed;
}

}  // namespace llmd::epp
