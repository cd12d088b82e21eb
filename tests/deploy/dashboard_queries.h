#pragma once
// The panel queries of the Grafana dashboards under deploy/dashboards/ (rows may nest panels),
// shared by dashboards_test.cc (metric names against /metrics) and prometheus_dashboards_test.cc
// (the queries evaluated by a real Prometheus).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmd::testing::dashboards {

inline const std::filesystem::path kDashboards =
    std::filesystem::path(LLMD_SOURCE_DIR) / "deploy" / "dashboards";

struct Query {
  std::string panel;
  std::string expr;
  std::string legend;  // the target's legendFormat
};

// Every target expression of a dashboard's panels (rows may nest panels).
inline void collect_queries(const nlohmann::json& panels, std::vector<Query>& out) {
  for (const auto& p : panels) {
    for (const auto& t : p.value("targets", nlohmann::json::array())) {
      out.push_back({p.value("title", "?"), t.value("expr", ""), t.value("legendFormat", "")});
    }
    if (p.contains("panels")) {
      collect_queries(p["panels"], out);
    }
  }
}

inline std::vector<Query> queries_of(const nlohmann::json& dashboard) {
  std::vector<Query> out;
  collect_queries(dashboard.value("panels", nlohmann::json::array()), out);
  return out;
}

// deploy/dashboards/<name> parsed; a discarded value (is_discarded()) when it is not JSON.
inline nlohmann::json read_dashboard(const std::string& name) {
  std::ifstream in(kDashboards / name);
  return nlohmann::json::parse(in, nullptr, false);
}

}  // namespace llmd::testing::dashboards
