// The Grafana dashboards under deploy/dashboards/ against the metrics the binaries export: the
// whole stack (modelsim pods, trainer, a predictor, the EPP) runs on loopback, serves a few
// requests so that labelled series exist, and every metric name a panel's PromQL selects must
// be one its binary's /metrics shows (epp.json -> the EPP, trainer.json -> the trainer,
// predictor.json -> the predictor). A histogram's _bucket/_sum/_count names count as the
// histogram. DeployDashboards.CheckerRejects* show that the checks can fail.
#include <gtest/gtest.h>

#include <cctype>
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
using dashboards::kDashboards;
using dashboards::Query;
using dashboards::read_dashboard;

// ---------------------------------------------------------------------------------------------
// PromQL: the metric names an expression selects

bool ident_start(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) != 0 || c == '_' || c == ':';
}
bool ident_char(char c) {
  return ident_start(c) || std::isdigit(static_cast<unsigned char>(c)) != 0;
}

// Index past the bracket that closes the one at `i` (`open` at expr[i]); quoted strings inside
// may hold brackets.
std::size_t past_closing(std::string_view expr, std::size_t i, char open, char close) {
  int depth = 0;
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      const auto end = expr.find(c, i + 1);
      i = end == std::string_view::npos ? expr.size() : end + 1;
      continue;
    }
    depth += c == open ? 1 : c == close ? -1 : 0;
    ++i;
    if (depth == 0) {
      break;
    }
  }
  return i;
}

// Metric names of a PromQL expression: identifiers that are not functions or aggregations,
// keywords, label names (inside {...} or the label list of by/without/on/ignoring/group_*),
// strings, ranges ([5m], [$__rate_interval]) or numbers.
std::set<std::string> promql_metric_names(std::string_view expr) {
  static const std::set<std::string, std::less<>> kAggregations = {
      "sum",  "avg",     "min",      "max",          "count", "stddev", "stdvar",
      "topk", "bottomk", "quantile", "count_values", "group", "limitk", "limit_ratio"};
  static const std::set<std::string, std::less<>> kLabelLists = {
      "by", "without", "on", "ignoring", "group_left", "group_right"};
  static const std::set<std::string, std::less<>> kKeywords = {"bool",   "and",   "or",  "unless",
                                                               "offset", "atan2", "inf", "nan"};
  std::set<std::string> out;
  std::size_t i = 0;
  while (i < expr.size()) {
    const char c = expr[i];
    if (c == '"' || c == '\'' || c == '`') {
      const auto end = expr.find(c, i + 1);
      i = end == std::string_view::npos ? expr.size() : end + 1;
    } else if (c == '{') {
      i = past_closing(expr, i, '{', '}');
    } else if (c == '[') {
      i = past_closing(expr, i, '[', ']');
    } else if (std::isdigit(static_cast<unsigned char>(c)) != 0 || c == '.') {
      while (i < expr.size() &&
             (std::isalnum(static_cast<unsigned char>(expr[i])) != 0 || expr[i] == '.')) {
        ++i;  // 0.99, 1e-5 (the sign is an operator), 5m
      }
    } else if (ident_start(c)) {
      std::size_t end = i;
      while (end < expr.size() && ident_char(expr[end])) {
        ++end;
      }
      const std::string_view ident = expr.substr(i, end - i);
      std::size_t next = end;
      while (next < expr.size() && std::isspace(static_cast<unsigned char>(expr[next])) != 0) {
        ++next;
      }
      const bool call = next < expr.size() && expr[next] == '(';
      if (kLabelLists.contains(ident)) {
        i = call ? past_closing(expr, next, '(', ')') : end;
      } else {
        if (!call && !kAggregations.contains(ident) && !kKeywords.contains(ident)) {
          out.insert(std::string(ident));
        }
        i = end;
      }
    } else {
      ++i;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Exposition text: the names a binary exports

struct Exported {
  std::set<std::string> samples;                // names of sample lines
  std::map<std::string, std::string> families;  // # TYPE name type
};

Exported parse_exposition(const std::string& text) {
  Exported e;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("# TYPE ")) {
      std::istringstream words(line.substr(7));
      std::string name, type;
      words >> name >> type;
      e.families[name] = type;
    } else if (!line.empty() && line[0] != '#') {
      e.samples.insert(line.substr(0, line.find_first_of("{ ")));
    }
  }
  return e;
}

// "" when `name` is exported, else why not.
std::string check_name(const std::string& name, const Exported& e) {
  if (e.samples.contains(name)) {
    return "";
  }
  for (const char* suffix : {"_bucket", "_sum", "_count"}) {
    if (name.ends_with(suffix)) {
      const std::string base = name.substr(0, name.size() - std::string_view(suffix).size());
      auto it = e.families.find(base);
      if (it != e.families.end() && (it->second == "histogram" || it->second == "summary")) {
        return "";
      }
    }
  }
  return "'" + name + "' is not exported";
}

std::vector<std::string> check_dashboard(const Json& dashboard, const Exported& e) {
  std::vector<std::string> problems;
  const std::vector<Query> queries = dashboards::queries_of(dashboard);
  if (queries.empty()) {
    problems.push_back("no queries");
  }
  for (const auto& q : queries) {
    const auto names = promql_metric_names(q.expr);
    if (names.empty()) {
      problems.push_back("panel '" + q.panel + "': no metric in '" + q.expr + "'");
    }
    for (const auto& n : names) {
      if (auto why = check_name(n, e); !why.empty()) {
        problems.push_back("panel '" + q.panel + "': " + why + " (" + q.expr + ")");
      }
    }
  }
  return problems;
}

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) {
    out += s + "\n";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

TEST(DeployDashboards, PromqlNamesAreTheSelectedMetricsOnly) {
  EXPECT_EQ(promql_metric_names(
                "histogram_quantile(0.99, sum by (le, route) (rate(x_seconds_bucket{route=\"/a b\","
                "code=~\"5..\"}[$__rate_interval])))"),
            (std::set<std::string>{"x_seconds_bucket"}));
  EXPECT_EQ(promql_metric_names("sum(rate(a_total[5m])) / sum(rate(b_total[5m])) by (pod)"),
            (std::set<std::string>{"a_total", "b_total"}));
  EXPECT_EQ(promql_metric_names("time() - last_success_seconds > bool 1e-3"),
            (std::set<std::string>{"last_success_seconds"}));
  EXPECT_EQ(promql_metric_names("a * on (pod) group_left (model) b or vector(0)"),
            (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(promql_metric_names("sum without (le) (c:recorded:rate5m)"),
            (std::set<std::string>{"c:recorded:rate5m"}));
}

TEST(DeployDashboards, CheckerRejectsNamesTheBinaryDoesNotExport) {
  const Exported e = parse_exposition(
      "# TYPE h_seconds histogram\nh_seconds_bucket{le=\"1\"} 1\nh_seconds_sum 1\n"
      "h_seconds_count 1\n# TYPE c_total counter\nc_total{code=\"200\"} 3\n"
      "# TYPE g gauge\n# TYPE s summary\n");
  EXPECT_EQ(check_name("h_seconds_bucket", e), "");
  EXPECT_EQ(check_name("c_total", e), "");
  EXPECT_EQ(check_name("s_count", e), "");         // a summary's count
  EXPECT_NE(check_name("h_seconds", e), "");       // a histogram's base selects no series
  EXPECT_NE(check_name("g", e), "");               // a family without any series
  EXPECT_NE(check_name("c_total_bucket", e), "");  // a counter has no buckets
  EXPECT_NE(check_name("c_totl", e), "");
  const Json misspelled = {
      {"panels",
       {{{"title", "p"},
         {"targets", {{{"expr", "rate(c_total[1m])"}}, {{"expr", "rate(c_totl[1m])"}}}}}}}};
  const auto problems = check_dashboard(misspelled, e);
  ASSERT_EQ(problems.size(), 1u) << join(problems);
  EXPECT_NE(problems[0].find("c_totl"), std::string::npos);
}

TEST(DeployDashboards, EveryDashboardIsValidJsonWithItsDatasourceVariable) {
  std::set<std::string> files;
  for (const auto& f : fs::directory_iterator(kDashboards)) {
    files.insert(f.path().filename().string());
  }
  EXPECT_EQ(files, (std::set<std::string>{"epp.json", "trainer.json", "predictor.json"}))
      << "a new dashboard needs its binary in DeployDashboards.EveryPanelQueriesExportedMetrics";
  std::set<std::string> uids;
  for (const auto& f : files) {
    const Json d = read_dashboard(f);
    ASSERT_TRUE(d.is_object()) << f << " is not valid JSON";
    EXPECT_FALSE(d.value("title", "").empty()) << f;
    EXPECT_TRUE(uids.insert(d.value("uid", "")).second) << f << ": duplicate or missing uid";
    bool has_variable = false;
    for (const auto& v : d["templating"]["list"]) {
      has_variable = has_variable ||
                     (v.value("name", "") == "datasource" && v.value("type", "") == "datasource");
    }
    EXPECT_TRUE(has_variable) << f << ": no datasource variable";
    for (const auto& p : d["panels"]) {
      EXPECT_EQ(p["datasource"].value("uid", ""), "${datasource}") << f << " " << p["title"];
    }
  }
}

// With two EPPs (overlays/ha), or a trainer and predictor per EPP pod, series of the same panel
// differ only by `instance` (the pod IP:port the Prometheus Operator sets): every legend names
// it, so that their lines can be told apart (prometheus_dashboards_test.cc checks that each
// result series carries the label).
TEST(DeployDashboards, EveryLegendNamesTheInstance) {
  for (const char* f : {"epp.json", "trainer.json", "predictor.json"}) {
    const Json d = read_dashboard(f);
    ASSERT_TRUE(d.is_object()) << f;
    for (const auto& q : dashboards::queries_of(d)) {
      EXPECT_NE(q.legend.find("{{instance}}"), std::string::npos)
          << f << " panel '" << q.panel << "': legend '" << q.legend << "' (" << q.expr << ")";
    }
  }
}

TEST(DeployDashboards, EveryPanelQueriesExportedMetrics) {
  StackOptions o;
  o.pods = 2;
  o.predictors = 1;
  Stack stack(o);
  ASSERT_TRUE(stack.ready) << stack.logs();
  // Labelled series appear with their first observation: streamed requests with SLO headers
  // (TTFT, TPOT, SLO metrics, feedback), until the predictor's answers are used.
  bool predicted = false;
  for (int i = 0; i < 100 && !predicted; ++i) {
    auto r = stack.complete(words(8, "dash" + std::to_string(i)), 3, true,
                            {{"x-slo-ttft-ms", "5000"}, {"x-slo-tpot-ms", "1000"}});
    ASSERT_EQ(r.status, 200) << r.body;
    predicted =
        metric_sum(stack.metrics(), "llmd_epp_scheduling_predictions_total{used=\"true\"}") > 0;
    if (!predicted) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  ASSERT_TRUE(predicted) << stack.logs();
  http::HttpClient predictor("127.0.0.1", stack.predictor_ports[0]);
  const std::map<std::string, std::string> exposition = {
      {"epp.json", stack.metrics()},
      {"trainer.json", stack.trainer->get("/metrics").body},
      {"predictor.json", predictor.get("/metrics").body}};
  for (const auto& [file, text] : exposition) {
    const Exported e = parse_exposition(text);
    ASSERT_GT(e.samples.size(), 5u) << file << ": no /metrics from its binary";
    const Json d = read_dashboard(file);
    ASSERT_TRUE(d.is_object()) << file;
    const auto problems = check_dashboard(d, e);
    EXPECT_TRUE(problems.empty()) << file << ":\n" << join(problems);
  }
}

}  // namespace
}  // namespace llmd::testing
