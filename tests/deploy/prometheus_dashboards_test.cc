// The Grafana dashboards under deploy/dashboards/ as Grafana would draw them: the whole stack
// (two modelsim pods, trainer, a predictor, the EPP) runs on loopback and serves streamed
// requests; Debian's real `prometheus` scrapes it with the relabelling the Prometheus Operator
// generates for deploy/monitoring/podmonitor.yaml (target labels namespace, pod, container,
// endpoint, job and instance; honor_labels as each podMetricsEndpoint's honorLabels, read from
// the file), and every panel query of every dashboard is evaluated through its HTTP API
// (/api/v1/query). The test fails when a query the stack must answer stays empty, when a
// per-pod panel (legend with {{pod}}) has fewer distinct `pod` values than the stack has pods
// (the Operator's `pod` won over the EPP's own and renamed it `exported_pod`), or when a result
// series has no `instance` (the legends' way to tell two EPPs apart). Skipped when no
// `prometheus` binary is installed (Debian 12 package `prometheus`; scripts/install-deps.sh).
#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/deploy/dashboard_queries.h"
#include "tests/e2e/stack_fixture.h"

namespace llmd::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const fs::path kPodMonitor =
    fs::path(LLMD_SOURCE_DIR) / "deploy" / "monitoring" / "podmonitor.yaml";
// The names the Operator's target labels get in this test (a pod of the base Deployment).
constexpr const char* kNamespace = "llm";
constexpr const char* kEppPod = "epp-5c9d7f8b6-x2x7q";

// The `prometheus` executable: $PROMETHEUS, else the first on $PATH; "" when there is none.
std::string find_prometheus() {
  if (const char* p = std::getenv("PROMETHEUS"); p != nullptr && *p != '\0') {
    return ::access(p, X_OK) == 0 ? p : "";
  }
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path != nullptr ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    const std::string exe = (dir.empty() ? "." : dir) + "/prometheus";
    if (::access(exe.c_str(), X_OK) == 0) {
      return exe;
    }
  }
  return "";
}

// The EPP PodMonitor's podMetricsEndpoints: port name -> honorLabels (false when absent, the
// Operator's default).
std::map<std::string, bool> pod_monitor_endpoints() {
  std::map<std::string, bool> out;
  for (const auto& doc : YAML::LoadAllFromFile(kPodMonitor.string())) {
    if (doc["kind"].as<std::string>("") != "PodMonitor" ||
        doc["metadata"]["name"].as<std::string>("") != "llmd-epp") {
      continue;
    }
    for (const auto& ep : doc["spec"]["podMetricsEndpoints"]) {
      out[ep["port"].as<std::string>()] = ep["honorLabels"] && ep["honorLabels"].as<bool>();
    }
  }
  return out;
}

struct Target {
  std::string port_name;  // the container port's name (the PodMonitor's `port`)
  std::string container;
  uint16_t port;
};

// One scrape job per podMetricsEndpoint, as the Operator writes it (job_name
// podMonitor/<namespace>/<name>/<index>): the pod's service-discovery labels (here static) are
// kept only for the endpoint's port name and copied into namespace, container and pod; job is
// <namespace>/<PodMonitor name>, endpoint the port name, instance the address. honor_labels:
// the endpoint's honorLabels. Endpoints whose port the stack lacks get no target, as in a pod
// without that port.
std::string scrape_config(const std::map<std::string, bool>& endpoints,
                          const std::vector<Target>& targets) {
  std::ostringstream y;
  y << "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n"
    << "scrape_configs:\n";
  int index = 0;
  for (const auto& [port_name, honor] : endpoints) {
    y << "- job_name: podMonitor/" << kNamespace << "/llmd-epp/" << index++ << "\n"
      << "  honor_labels: " << (honor ? "true" : "false") << "\n"
      << "  honor_timestamps: true\n  metrics_path: /metrics\n  scheme: http\n"
      << "  static_configs:\n";
    for (const auto& t : targets) {
      y << "  - targets: ['127.0.0.1:" << t.port << "']\n"
        << "    labels: {__meta_kubernetes_namespace: " << kNamespace
        << ", __meta_kubernetes_pod_name: " << kEppPod
        << ", __meta_kubernetes_pod_container_name: " << t.container
        << ", __meta_kubernetes_pod_container_port_name: " << t.port_name
        << ", __meta_kubernetes_pod_label_app_kubernetes_io_name: llmd-epp}\n";
    }
    y << "  relabel_configs:\n"
      << "  - {source_labels: [job], target_label: __tmp_prometheus_job_name}\n"
      << "  - {action: keep, source_labels: [__meta_kubernetes_pod_label_app_kubernetes_io_name],"
         " regex: llmd-epp}\n"
      << "  - {action: keep, source_labels: [__meta_kubernetes_pod_container_port_name], regex: "
      << port_name << "}\n"
      << "  - {source_labels: [__meta_kubernetes_namespace], target_label: namespace}\n"
      << "  - {source_labels: [__meta_kubernetes_pod_container_name], target_label: container}\n"
      << "  - {source_labels: [__meta_kubernetes_pod_name], target_label: pod}\n"
      << "  - {target_label: job, replacement: " << kNamespace << "/llmd-epp}\n"
      << "  - {target_label: endpoint, replacement: " << port_name << "}\n";
  }
  return y.str();
}

std::string form_encode(const std::string& s) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (unsigned char c : s) {
    if (std::isalnum(c) != 0 || c == '-' || c == '_' || c == '.' || c == '~') {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

// Grafana's variables as a dashboard's queries would get them: intervals 1m, ranges 5m, any
// template variable `.*`.
std::string substitute_variables(std::string expr) {
  const std::vector<std::pair<std::string, std::string>> builtins = {
      {"$__rate_interval", "1m"}, {"${__rate_interval}", "1m"}, {"$__interval", "1m"},
      {"${__interval}", "1m"},    {"$__range", "5m"},           {"${__range}", "5m"}};
  for (const auto& [from, to] : builtins) {
    for (auto at = expr.find(from); at != std::string::npos; at = expr.find(from, at)) {
      expr.replace(at, from.size(), to);
    }
  }
  for (auto at = expr.find('$'); at != std::string::npos; at = expr.find('$', at)) {
    std::size_t end = at + 1;
    if (end < expr.size() && expr[end] == '{') {
      end = expr.find('}', end);
      end = end == std::string::npos ? expr.size() : end + 1;
    } else {
      while (end < expr.size() &&
             (std::isalnum(static_cast<unsigned char>(expr[end])) != 0 || expr[end] == '_')) {
        ++end;
      }
    }
    expr.replace(at, end - at, ".*");
  }
  return expr;
}

struct Series {
  std::map<std::string, std::string> labels;
  std::string value;
};
struct Evaluated {
  std::string error;  // the API's error, or a transport failure
  std::vector<Series> series;
};

Evaluated evaluate(uint16_t port, const std::string& expr) {
  http::HttpClient c("127.0.0.1", port, std::chrono::seconds(10));
  const auto r = c.request("POST", "/api/v1/query", "query=" + form_encode(expr),
                           "application/x-www-form-urlencoded");
  Evaluated out;
  const Json j = Json::parse(r.body, nullptr, false);
  if (r.status != 200 || !j.is_object() || j.value("status", "") != "success") {
    out.error = "HTTP " + std::to_string(r.status) + " " + r.error + " " + r.body.substr(0, 300);
    return out;
  }
  const Json& data = j["data"];
  if (data.value("resultType", "") == "scalar") {
    out.series.push_back({{}, data["result"][1].get<std::string>()});
    return out;
  }
  for (const auto& s : data["result"]) {
    Series one;
    for (const auto& [k, v] : s["metric"].items()) {
      one.labels[k] = v.get<std::string>();
    }
    one.value = s.contains("value") ? s["value"][1].get<std::string>() : "";
    out.series.push_back(std::move(one));
  }
  return out;
}

struct PanelQuery {
  std::string file;
  dashboards::Query q;
  std::string expr;  // with the variables substituted
  bool per_pod = false;
};

// "" when the result is what the stack must produce for `p`, else what is wrong.
std::string judge(const PanelQuery& p, const Evaluated& e, int pods) {
  const std::string where = p.file + " panel '" + p.q.panel + "' (" + p.q.expr + "): ";
  if (!e.error.empty()) {
    return where + "query failed: " + e.error;
  }
  if (e.series.empty()) {
    return where + "empty result";  // this stack produces every series the panels select
  }
  std::set<std::string> pod_values;
  bool exported_pod = false;
  for (const auto& s : e.series) {
    if (!s.labels.contains("instance") && !s.labels.empty()) {
      return where + "a series without `instance` (its legend needs it)";
    }
    if (auto it = s.labels.find("pod"); it != s.labels.end()) {
      pod_values.insert(it->second);
    }
    exported_pod = exported_pod || s.labels.contains("exported_pod");
  }
  if (p.per_pod && static_cast<int>(pod_values.size()) < pods) {
    std::string values;
    for (const auto& v : pod_values) {
      values += " " + v;
    }
    return where + "collapsed: " + std::to_string(pod_values.size()) +
           " distinct `pod` value(s) (" + values + " ) for " + std::to_string(pods) + " pods" +
           (exported_pod ? "; the EPP's own label was renamed `exported_pod` (honorLabels?)" : "");
  }
  return "";
}

TEST(DeployDashboardsPrometheus, EveryPanelHasDataThroughThePodMonitorsRelabelling) {
  const std::string prometheus = find_prometheus();
  if (prometheus.empty()) {
    GTEST_SKIP() << "no prometheus binary (apt-get install prometheus, or set PROMETHEUS=path)";
  }
  const auto endpoints = pod_monitor_endpoints();
  ASSERT_TRUE(endpoints.contains("metrics") && endpoints.contains("trainer") &&
              endpoints.contains("predictor-1"))
      << kPodMonitor << ": no llmd-epp PodMonitor with the metrics, trainer, predictor-1 ports";

  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();

  TempDir dir;
  {
    std::ofstream f(dir.file("prometheus.yml"));
    f << scrape_config(endpoints, {{"metrics", "epp", stack.metrics_port},
                                   {"trainer", "trainer", stack.trainer->port},
                                   {"predictor-1", "predictor-1", stack.predictor_ports[0]}});
  }
  const uint16_t port = free_port();
  Process prom(
      prometheus,
      {"--config.file=" + dir.file("prometheus.yml"), "--storage.tsdb.path=" + dir.file("data"),
       "--web.listen-address=127.0.0.1:" + std::to_string(port), "--log.level=warn"});
  ASSERT_TRUE(prom.wait_http_ok(port, "/-/ready", std::chrono::seconds(20))) << prom.log();

  // Traffic until the predictor's answers are used (a trained model): streamed requests with
  // SLO headers fill the TTFT/TPOT, prediction, SLO and feedback series.
  int sent = 0;
  auto send = [&] {
    auto r = stack.complete(words(8, "prom" + std::to_string(sent++)), 3, true,
                            {{"x-slo-ttft-ms", "5000"}, {"x-slo-tpot-ms", "1000"}});
    return r.status;
  };
  bool predicted = false;
  for (int i = 0; i < 150 && !predicted; ++i) {
    ASSERT_EQ(send(), 200) << stack.logs();
    predicted =
        metric_sum(stack.metrics(), "llmd_epp_scheduling_predictions_total{used=\"true\"}") > 0;
    if (!predicted) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(predicted) << stack.logs();

  std::vector<PanelQuery> queries;
  for (const char* file : {"epp.json", "trainer.json", "predictor.json"}) {
    const Json d = dashboards::read_dashboard(file);
    ASSERT_TRUE(d.is_object()) << file;
    for (const auto& q : dashboards::queries_of(d)) {
      queries.push_back(
          {file, q, substitute_variables(q.expr), q.legend.find("{{pod}}") != std::string::npos});
    }
  }
  ASSERT_GT(queries.size(), 40u);

  // Until every query answers as it must (series need a scrape or two, rates two samples,
  // trainer panels a fit), with a generous bound; a collapsed per-pod panel with `exported_pod`
  // is final at once.
  std::map<std::size_t, std::string> problems;
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  for (;;) {
    problems.clear();
    bool final_only = true;
    for (std::size_t i = 0; i < queries.size(); ++i) {
      const Evaluated e = evaluate(port, queries[i].expr);
      if (auto why = judge(queries[i], e, o.pods); !why.empty()) {
        problems[i] = why;
        final_only = final_only && why.find("exported_pod") != std::string::npos;
      }
    }
    if (problems.empty() || final_only || Clock::now() > deadline) {
      break;
    }
    send();  // keeps the rates above 0
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::string report;
  for (const auto& [i, why] : problems) {
    report += why + "\n";
  }
  EXPECT_TRUE(problems.empty()) << problems.size() << " of " << queries.size()
                                << " panel queries (honorLabels of 'metrics': "
                                << endpoints.at("metrics") << "):\n"
                                << report;
  // The Operator's target labels are on every series (instance tells two EPPs apart).
  const Evaluated up = evaluate(port, "up");
  ASSERT_EQ(up.series.size(), 3u) << prom.log();
  for (const auto& s : up.series) {
    EXPECT_EQ(s.value, "1") << s.labels.at("endpoint");
    for (const char* l : {"namespace", "pod", "container", "endpoint", "instance", "job"}) {
      EXPECT_TRUE(s.labels.contains(l)) << l;
    }
  }
  EXPECT_EQ(prom.terminate(), 0) << prom.log();
}

}  // namespace
}  // namespace llmd::testing
