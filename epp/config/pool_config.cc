#include "epp/config/pool_config.h"

#include <algorithm>
#include <filesystem>
#include <set>
#include <stdexcept>

#include <yaml-cpp/yaml.h>

#include "common/util/files.h"
#include "epp/scheduler/config_loader.h"
#include "epp/scheduler/upstream_config.h"
#include "epp/scheduler/yaml_json.h"

namespace llmd::epp {

namespace {

std::filesystem::path beside(const std::string& config_path, const std::string& name) {
  auto p = std::filesystem::path(name);
  return p.is_relative() ? std::filesystem::path(config_path).parent_path() / p : p;
}

std::vector<PodConfig> read_pods(const YAML::Node& root, PodSource pods_from) {
  const YAML::Node pool = root["pool"];
  if (pool && !pool.IsMap()) {
    throw std::runtime_error("pool must be a mapping with a pods list");
  }
  const bool has_pods = pool && pool["pods"];
  if (pods_from == PodSource::kKubernetes) {
    if (has_pods) {
      throw std::runtime_error(
          "pool.pods is not allowed with Kubernetes discovery (--pool-name / --pool-selector): "
          "the pods come from the API server");
    }
    return {};
  }
  const YAML::Node pods = has_pods ? pool["pods"] : YAML::Node();
  if (!has_pods || !pods.IsSequence() || pods.size() == 0) {
    throw std::runtime_error("pool.pods must be a non-empty list");
  }
  std::vector<PodConfig> out;
  std::set<std::string> names;
  for (std::size_t i = 0; i < pods.size(); ++i) {
    PodConfig p;
    p.name = pods[i]["name"].as<std::string>("");
    p.address = pods[i]["address"].as<std::string>("");
    if (p.name.empty() || p.address.find(':') == std::string::npos) {
      throw std::runtime_error("pool.pods[" + std::to_string(i) +
                               "] needs a name and an address host:port");
    }
    const std::string port = p.address.substr(p.address.rfind(':') + 1);
    if (port.empty() || port.size() > 5 ||
        port.find_first_not_of("0123456789") != std::string::npos || std::stoi(port) > 65535) {
      throw std::runtime_error("pool.pods[" + std::to_string(i) + "] address '" + p.address +
                               "' has no valid port");
    }
    if (!names.insert(p.name).second) {
      throw std::runtime_error("duplicate pod name '" + p.name + "'");
    }
    if (YAML::Node labels = pods[i]["labels"]) {
      for (const auto& kv : labels) {
        p.labels[kv.first.as<std::string>()] = kv.second.as<std::string>();
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

// One schema: the EPP's own keys beside upstream's EndpointPickerConfig keys.
void check_top_level_keys(const YAML::Node& root) {
  for (const auto& kv : root) {
    const auto key = kv.first.as<std::string>();
    auto is = [&key](std::string_view k) { return k == key; };
    if (std::none_of(kEppFileKeys.begin(), kEppFileKeys.end(), is) &&
        std::none_of(kPipelineKeys.begin(), kPipelineKeys.end(), is)) {
      throw std::runtime_error("unknown key '" + key + "'");
    }
  }
  auto json_of = [&root](const char* key) {
    return root[key] ? yaml_to_json(root[key]) : nlohmann::json();
  };
  if (auto e = upstream::check_type_meta(json_of("apiVersion"), json_of("kind")); !e.empty()) {
    throw std::runtime_error(e);
  }
}

// The pipeline is in one place: a file named by `pipeline`, or inline `plugins`.
void read_pipeline_source(const YAML::Node& root, const std::string& path, const std::string& text,
                          EppFileConfig& cfg) {
  if (YAML::Node pipeline = root["pipeline"]) {
    for (std::string_view key : kPipelineKeys) {
      if (key != "apiVersion" && key != "kind" && root[std::string(key)]) {
        throw std::runtime_error("'" + std::string(key) +
                                 "' is given here and 'pipeline' names a file: the pipeline "
                                 "is in one place");
      }
    }
    cfg.pipeline_path = beside(path, pipeline.as<std::string>()).string();
  } else if (root["plugins"]) {
    cfg.pipeline_text = text;
  } else {
    throw std::runtime_error("either 'pipeline' (a file) or inline 'plugins' is required");
  }
}

void read_load_balancing(const YAML::Node& lb, const std::string& path, EppFileConfig& cfg) {
  nlohmann::json doc;
  if (lb.IsScalar()) {
    cfg.load_balancing_path = beside(path, lb.as<std::string>()).string();
    auto lb_text = util::read_file(cfg.load_balancing_path);
    if (!lb_text) {
      throw std::runtime_error("loadBalancing: cannot read " + cfg.load_balancing_path);
    }
    doc = yaml_to_json(YAML::Load(*lb_text));
  } else {
    doc = yaml_to_json(lb);
  }
  auto parsed = routing::parse_load_balancing_config(doc);
  if (auto* error = std::get_if<std::string>(&parsed)) {
    throw std::runtime_error("loadBalancing: " + *error);
  }
  cfg.load_balancing = std::get<routing::LoadBalancingConfig>(std::move(parsed));
}

DecisionLogConfig read_decision_log(const YAML::Node& d) {
  if (!d.IsMap()) {
    throw std::runtime_error("decisionLog must be a mapping");
  }
  DecisionLogConfig out;
  for (const auto& kv : d) {
    const auto key = kv.first.as<std::string>();
    if (key == "sampleRate") {
      out.sample_rate = kv.second.as<double>();
    } else if (key == "maxLinesPerSecond") {
      out.max_lines_per_second = kv.second.as<double>();
    } else if (key == "maxCandidates") {
      const auto n = kv.second.as<int64_t>();
      out.max_candidates = n < 0 ? 0 : static_cast<std::size_t>(n);
    } else {
      throw std::runtime_error("decisionLog: unknown key '" + key + "'");
    }
  }
  if (auto error = out.validate(); !error.empty()) {
    throw std::runtime_error("decisionLog: " + error);
  }
  return out;
}

}  // namespace

EppFileConfig load_epp_config(const std::string& path, PodSource pods_from) {
  auto text = util::read_file(path);
  if (!text) {
    throw std::runtime_error("cannot read EPP config " + path);
  }
  EppFileConfig cfg;
  try {
    YAML::Node root = YAML::Load(*text);
    if (!root.IsMap()) {
      throw std::runtime_error("top level must be a mapping");
    }
    cfg.pods = read_pods(root, pods_from);
    cfg.startup = read_startup_settings(root);
    check_top_level_keys(root);
    read_pipeline_source(root, path, *text, cfg);
    if (YAML::Node objectives = root["objectives"]) {
      auto parsed = ObjectiveTable::parse(yaml_to_json(objectives));
      if (auto* error = std::get_if<std::string>(&parsed)) {
        throw std::runtime_error(*error);
      }
      cfg.objectives = std::make_shared<ObjectiveTable>(std::get<ObjectiveTable>(parsed));
    }
    if (YAML::Node lb = root["loadBalancing"]) {
      read_load_balancing(lb, path, cfg);
    }
    if (YAML::Node q = root["routerQueue"]) {
      auto parsed = parse_router_queue_config(yaml_to_json(q));
      if (auto* error = std::get_if<std::string>(&parsed)) {
        throw std::runtime_error(*error);
      }
      cfg.router_queue = std::get<RouterQueueConfig>(std::move(parsed));
    }
    if (YAML::Node d = root["decisionLog"]) {
      cfg.decision_log = read_decision_log(d);
    }
  } catch (const YAML::Exception& e) {
    throw std::runtime_error("EPP config " + path + ": " + e.what());
  } catch (const std::runtime_error& e) {
    throw std::runtime_error("EPP config " + path + ": " + e.what());
  }
  return cfg;
}

}  // namespace llmd::epp
