#include "epp/scheduler/config_loader.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <stdexcept>

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include "epp/scheduler/config_plugins.h"
#include "epp/scheduler/metrics.h"
#include "epp/scheduler/upstream_config.h"
#include "epp/scheduler/yaml_json.h"

namespace llmd::epp {
namespace {

// Load-time only: stages throw LoadError, load_pipeline() turns it into a LoadResult.
struct LoadError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void fail(const std::string& message) {
  throw LoadError(message);
}

std::string line_of(const YAML::Node& n) {
  const auto m = n.Mark();
  return m.line >= 0 ? " (line " + std::to_string(m.line + 1) + ")" : "";
}

std::string label(const std::string& name, std::string_view type) {
  return "plugin '" + name + "' (type " + std::string(type) + ")";
}

std::string attribute_name(AttributeKey k) {
  switch (k) {
    case AttributeKey::kPrefixCacheMatch:
      return "prefix-cache match info";
    case AttributeKey::kLatencyPrediction:
      return "latency prediction info";
  }
  return "unknown attribute";
}

// The producer added when some plugin reads an attribute nobody writes. Latency predictions
// get none: without a producer (or a predictor) their readers use a documented fallback.
std::optional<std::string_view> default_producer(AttributeKey k) {
  if (k == AttributeKey::kPrefixCacheMatch) {
    return "approx-prefix-cache-producer";
  }
  return std::nullopt;
}

void check_keys(const YAML::Node& map, const std::vector<std::string_view>& allowed,
                const std::string& context) {
  for (const auto& kv : map) {
    auto key = kv.first.as<std::string>();
    if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
      std::string known;
      for (auto a : allowed) {
        known += (known.empty() ? "" : ", ") + std::string(a);
      }
      fail(context + ": unknown key '" + key + "'" + line_of(kv.first) + " (expected " + known +
           ")");
    }
  }
}

std::string required_string(const YAML::Node& map, const char* key, const std::string& context) {
  const YAML::Node v = map[key];
  if (!v || !v.IsScalar() || v.Scalar().empty()) {
    fail(context + ": '" + key + "' is required and must be a string" + line_of(map));
  }
  return v.Scalar();
}

struct PluginSpec {
  std::string type, name;
  nlohmann::json params;
};
struct RefSpec {
  std::string ref;
  std::optional<double> weight;
  std::string line;
};
struct ProfileSpec {
  std::string name;
  std::vector<RefSpec> refs;
};

// A configuration plugin (data layer, parser, profile handler): used by name from a top-level
// section, never in a profile.
bool configures_epp(const PluginPtr& p) {
  return std::dynamic_pointer_cast<const MetricsDataSource>(p) ||
         std::dynamic_pointer_cast<const MetricsExtractor>(p) ||
         std::dynamic_pointer_cast<const RequestParser>(p) ||
         std::dynamic_pointer_cast<const ProfileHandler>(p);
}

// Stage 1: strict decode.
void decode(const YAML::Node& root, Document document, std::vector<PluginSpec>& plugins,
            std::vector<ProfileSpec>& profiles, upstream::Sections& sections) {
  if (!root.IsMap()) {
    fail("configuration must be a mapping with 'plugins' and 'schedulingProfiles'");
  }
  std::vector<std::string_view> keys(kPipelineKeys.begin(), kPipelineKeys.end());
  if (document == Document::kEppFile) {
    keys.insert(keys.end(), kEppFileKeys.begin(), kEppFileKeys.end());
  }
  check_keys(root, keys, "configuration");
  auto section = [&root](const char* key) {
    return root[key] ? yaml_to_json(root[key]) : nlohmann::json();
  };
  if (auto e = upstream::check_type_meta(section("apiVersion"), section("kind")); !e.empty()) {
    fail(e);
  }
  sections.api_version = section("apiVersion");
  sections.parser = section("parser");
  sections.request_handler = section("requestHandler");
  sections.data_layer = section("dataLayer");
  sections.saturation_detector = section("saturationDetector");
  sections.flow_control = section("flowControl");
  // Gates first, as upstream: they may change how the rest loads.
  if (auto e = upstream::parse_feature_gates(section("featureGates"), sections.gates); !e.empty()) {
    fail(e);
  }
  const YAML::Node ps = root["plugins"];
  if (ps && !ps.IsNull() && !ps.IsSequence()) {
    fail("'plugins' must be a list" + line_of(ps));
  }
  std::set<std::string> names;
  for (std::size_t i = 0; ps && i < ps.size(); ++i) {
    const YAML::Node p = ps[i];
    std::string ctx = "plugins[" + std::to_string(i) + "]";
    if (!p.IsMap()) {
      fail(ctx + ": must be a mapping with type, name, parameters" + line_of(p));
    }
    PluginSpec spec;
    spec.type = required_string(p, "type", ctx);
    spec.name = p["name"] ? required_string(p, "name", ctx) : spec.type;
    ctx = label(spec.name, spec.type);
    check_keys(p, {"type", "name", "parameters"}, ctx);
    if (p["parameters"] && !p["parameters"].IsNull() && !p["parameters"].IsMap()) {
      fail(ctx + ": 'parameters' must be a mapping" + line_of(p["parameters"]));
    }
    spec.params = p["parameters"] ? yaml_to_json(p["parameters"]) : nlohmann::json();
    if (!names.insert(spec.name).second) {
      fail(ctx + ": the name '" + spec.name + "' is used by another plugin" + line_of(p));
    }
    plugins.push_back(std::move(spec));
  }
  const YAML::Node prs = root["schedulingProfiles"];
  if (!prs || !prs.IsSequence() || prs.size() == 0) {
    fail("'schedulingProfiles' must list at least one profile");
  }
  std::set<std::string> profile_names;
  for (std::size_t i = 0; i < prs.size(); ++i) {
    const YAML::Node pr = prs[i];
    std::string ctx = "schedulingProfiles[" + std::to_string(i) + "]";
    if (!pr.IsMap()) {
      fail(ctx + ": must be a mapping with name, plugins" + line_of(pr));
    }
    ProfileSpec spec;
    spec.name = required_string(pr, "name", ctx);
    ctx = "profile '" + spec.name + "'";
    check_keys(pr, {"name", "plugins"}, ctx);
    if (!profile_names.insert(spec.name).second) {
      fail(ctx + ": defined twice" + line_of(pr));
    }
    const YAML::Node refs = pr["plugins"];
    if (refs && !refs.IsNull() && !refs.IsSequence()) {
      fail(ctx + ": 'plugins' must be a list" + line_of(refs));
    }
    for (std::size_t j = 0; refs && j < refs.size(); ++j) {
      const YAML::Node r = refs[j];
      std::string rctx = ctx + " plugins[" + std::to_string(j) + "]";
      if (!r.IsMap()) {
        fail(rctx + ": must be a mapping with pluginRef, weight" + line_of(r));
      }
      check_keys(r, {"pluginRef", "weight"}, rctx);
      RefSpec ref{required_string(r, "pluginRef", rctx), std::nullopt, line_of(r)};
      if (r["weight"]) {
        nlohmann::json w = yaml_to_json(r["weight"]);
        if (!w.is_number() || !(w.get<double>() >= 0)) {
          fail(rctx + ": weight of '" + ref.ref + "' must be a number >= 0, got " +
               r["weight"].Scalar() + line_of(r["weight"]));
        }
        ref.weight = w.get<double>();
      }
      spec.refs.push_back(std::move(ref));
    }
    profiles.push_back(std::move(spec));
  }
}

PluginPtr instantiate(const PluginRegistry& registry, const Handle& handle, const std::string& type,
                      const std::string& name, const nlohmann::json& params) {
  const PluginFactory* factory = registry.find(type);
  if (factory == nullptr) {
    if (auto why = upstream::refused_plugin_type(type)) {
      fail(label(name, type) + ": not supported: " + std::string(*why));
    }
    std::string known;
    for (const auto& t : registry.types()) {
      known += (known.empty() ? "" : ", ") + t;
    }
    fail(label(name, type) + ": unknown plugin type (known: " + known + ")");
  }
  PluginOrError made = (*factory)(name, params, handle);
  if (!made.plugin) {
    fail(label(name, type) + ": " + (made.error.empty() ? "factory failed" : made.error));
  }
  return made.plugin;
}

template <class T>
Stage<T> stage(const PluginPtr& p, SchedulerMetrics* metrics, std::string_view point) {
  return {std::dynamic_pointer_cast<const T>(p),
          metrics ? metrics->plugin_duration(point, p->type(), p->name()) : PluginTimer{}};
}

// Stage 5: attribute order and default producers.
void check_attributes(Pipeline& pl, const PluginRegistry& registry, const Handle& handle,
                      SchedulerMetrics* metrics) {
  auto producer_of = [&pl](AttributeKey k, std::size_t from, std::size_t to) -> const Plugin* {
    for (std::size_t i = from; i < to && i < pl.producers.size(); ++i) {
      auto keys = pl.producers[i].plugin->produces();
      if (std::find(keys.begin(), keys.end(), k) != keys.end()) {
        return pl.producers[i].plugin.get();
      }
    }
    return nullptr;
  };
  for (std::size_t i = 0; i < pl.producers.size(); ++i) {
    const auto& p = *pl.producers[i].plugin;
    for (AttributeKey k : p.consumes()) {
      const Plugin* later = producer_of(k, i + 1, pl.producers.size());
      if (producer_of(k, 0, i) == nullptr && later != nullptr) {
        fail(label(p.name(), p.type()) + " reads " + attribute_name(k) + " written by " +
             label(later->name(), later->type()) + ", which is listed after it; list it first");
      }
    }
  }
  std::set<std::string> names;
  for (const auto& p : pl.plugins) {
    names.insert(p->name());
  }
  for (const auto& consumer : std::vector<PluginPtr>(pl.plugins)) {
    for (AttributeKey k : consumer->consumes()) {
      if (producer_of(k, 0, pl.producers.size()) != nullptr) {
        continue;
      }
      auto type = default_producer(k);
      if (!type || registry.find(*type) == nullptr) {
        spdlog::warn("{} reads {} but no producer writes it; it uses its fallback",
                     label(consumer->name(), consumer->type()), attribute_name(k));
        continue;
      }
      std::string name(*type);
      while (names.count(name) != 0) {
        name += "-default";
      }
      PluginPtr added = instantiate(registry, handle, std::string(*type), name, nullptr);
      spdlog::info("{} reads {}; adding default producer {}",
                   label(consumer->name(), consumer->type()), attribute_name(k),
                   label(name, *type));
      names.insert(name);
      pl.plugins.push_back(added);
      pl.producers.insert(pl.producers.begin(), stage<DataProducer>(added, metrics, "producer"));
    }
  }
}

// Upstream's one profile handler, and what the endpoint role label plugins say.
void check_configuration_plugins(const Pipeline& pl, std::size_t profiles,
                                 LoadedSettings& settings) {
  const Plugin* handler = nullptr;
  const Plugin* role_from = nullptr;
  for (const auto& p : pl.plugins) {
    if (std::dynamic_pointer_cast<const ProfileHandler>(p)) {
      if (handler != nullptr) {
        fail("profile handlers " + label(handler->name(), handler->type()) + " and " +
             label(p->name(), p->type()) + ": only one is allowed");
      }
      handler = p.get();
    }
    if (auto r = std::dynamic_pointer_cast<const EndpointRoleLabel>(p)) {
      if (role_from != nullptr && r->endpoint_role_label() != settings.endpoint_role_label) {
        fail(label(p->name(), p->type()) + ": endpointRoleLabel '" + r->endpoint_role_label() +
             "' differs from '" + settings.endpoint_role_label + "' of " +
             label(role_from->name(), role_from->type()) +
             "; the role label is one for the whole EPP (predictions and training agree on it)");
      }
      settings.endpoint_role_label = r->endpoint_role_label();
      role_from = p.get();
    }
  }
  if (handler != nullptr && handler->type() == "single-profile-handler" && profiles > 1) {
    fail(label(handler->name(), handler->type()) + " cannot serve " + std::to_string(profiles) +
         " scheduling profiles (as upstream: one profile with it)");
  }
}

PipelineConstPtr build(const YAML::Node& root, Document document, const PluginRegistry& registry,
                       const Handle& handle, SchedulerMetrics* metrics, LoadedSettings& settings) {
  std::vector<PluginSpec> specs;
  std::vector<ProfileSpec> profile_specs;
  upstream::Sections sections;
  decode(root, document, specs, profile_specs, sections);

  // Stages 2-3: instantiate (factories validate their parameters) and sort by interface.
  auto pl = std::make_shared<Pipeline>();
  std::map<std::string, PluginPtr> by_name;
  for (const auto& s : specs) {
    PluginPtr p = instantiate(registry, handle, s.type, s.name, s.params);
    by_name[s.name] = p;
    pl->plugins.push_back(p);
    if (std::dynamic_pointer_cast<const DataProducer>(p)) {
      pl->producers.push_back(stage<DataProducer>(p, metrics, "producer"));
    }
    if (std::dynamic_pointer_cast<const Admitter>(p)) {
      pl->admitters.push_back(stage<Admitter>(p, metrics, "admitter"));
    }
  }

  // Stage 4: profiles.
  std::set<std::string> referenced;
  for (const auto& ps : profile_specs) {
    std::string ctx = "profile '" + ps.name + "'";
    std::vector<Stage<Filter>> filters;
    std::vector<ScorerStage> scorers;
    Stage<Picker> picker;
    std::set<std::string> seen;
    for (const auto& r : ps.refs) {
      auto it = by_name.find(r.ref);
      if (it == by_name.end()) {
        fail(ctx + ": pluginRef '" + r.ref + "' names no plugin" + r.line);
      }
      const PluginPtr& p = it->second;
      std::string lbl = ctx + ": " + label(p->name(), p->type());
      if (!seen.insert(r.ref).second) {
        fail(lbl + " is referenced twice" + r.line);
      }
      referenced.insert(r.ref);
      bool used = false;
      if (std::dynamic_pointer_cast<const Filter>(p)) {
        filters.push_back(stage<Filter>(p, metrics, "filter"));
        used = true;
      }
      if (auto s = std::dynamic_pointer_cast<const Scorer>(p)) {
        auto st = stage<Scorer>(p, metrics, "scorer");
        scorers.push_back({st.plugin, r.weight.value_or(1.0), st.duration});
        used = true;
      } else if (r.weight) {
        fail(lbl + " is not a scorer and takes no weight" + r.line);
      }
      if (std::dynamic_pointer_cast<const Picker>(p)) {
        if (picker.plugin) {
          fail(lbl + ": the profile already has picker '" + picker.plugin->name() + "'" + r.line);
        }
        picker = stage<Picker>(p, metrics, "picker");
        used = true;
      }
      if (!used && (std::dynamic_pointer_cast<const DataProducer>(p) ||
                    std::dynamic_pointer_cast<const Admitter>(p))) {
        used = true;  // upstream lists its producer here; it runs for every request anyway
      }
      if (!used) {
        fail(lbl + " is not a filter, scorer, picker, producer or admitter" +
             (configures_epp(p) ? std::string(" (it configures the EPP through its top-level "
                                              "section, not in a profile)")
                                : std::string()) +
             r.line);
      }
    }
    if (!picker.plugin) {
      // llm-d's default: the best score wins, ties at random.
      std::string name = ps.name + "-max-score-picker";
      PluginPtr p = instantiate(registry, handle, "max-score-picker", name, nullptr);
      pl->plugins.push_back(p);
      picker = stage<Picker>(p, metrics, "picker");
    }
    pl->profiles.emplace_back(ps.name, std::move(filters), std::move(scorers), std::move(picker));
  }
  check_configuration_plugins(*pl, profile_specs.size(), settings);
  upstream::SectionsResult applied;
  if (auto e = upstream::apply_sections(sections, by_name, applied); !e.empty()) {
    fail(e);
  }
  settings.scrape = std::move(applied.scrape);
  for (const auto& s : specs) {
    auto& p = by_name[s.name];
    bool runs_always = std::dynamic_pointer_cast<const DataProducer>(p) ||
                       std::dynamic_pointer_cast<const Admitter>(p);
    if (configures_epp(p)) {
      if (applied.used.count(s.name) == 0 && !std::dynamic_pointer_cast<const ProfileHandler>(p)) {
        spdlog::warn("{} is not used by the dataLayer, parser or requestHandler section",
                     label(s.name, s.type));
      }
    } else if (!runs_always && referenced.count(s.name) == 0) {
      spdlog::warn("{} is not referenced by any profile and never runs", label(s.name, s.type));
    }
  }
  check_attributes(*pl, registry, handle, metrics);
  for (const auto& p : pl->plugins) {
    if (auto mode = p->training_streaming_mode()) {
      pl->streaming_mode = *mode;
    }
    if (p->ignores_predictions()) {
      pl->predictions_ignored = true;
      spdlog::info("{} ignores predictions: requests are scheduled without asking the predictor",
                   label(p->name(), p->type()));
    }
  }
  if (!pl->streaming_mode) {
    spdlog::info(
        "no plugin trains this pipeline (no predicted-latency-producer): completed "
        "requests are not sent to the trainer");
  }
  return pl;
}

}  // namespace

LoadResult load_pipeline(std::string_view yaml_text, const PluginRegistry& registry,
                         const Handle& handle, SchedulerMetrics* metrics, Document document) {
  try {
    YAML::Node root = YAML::Load(std::string(yaml_text));
    LoadResult r;
    r.pipeline = build(root, document, registry, handle, metrics, r.settings);
    return r;
  } catch (const LoadError& e) {
    return {nullptr, e.what(), {}};
  } catch (const YAML::Exception& e) {
    return {nullptr, std::string("invalid YAML: ") + e.what(), {}};
  }
}

LoadResult load_pipeline_file(const std::string& path, const PluginRegistry& registry,
                              const Handle& handle, SchedulerMetrics* metrics) {
  std::ifstream in(path);
  if (!in) {
    return {nullptr, "cannot read scheduler configuration " + path, {}};
  }
  std::stringstream ss;
  ss << in.rdbuf();
  LoadResult r = load_pipeline(ss.str(), registry, handle, metrics);
  if (!r.ok()) {
    r.error = path + ": " + r.error;
  }
  return r;
}

}  // namespace llmd::epp
