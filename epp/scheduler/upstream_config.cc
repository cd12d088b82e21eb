#include "epp/scheduler/upstream_config.h"

#include <algorithm>
#include <utility>

#include <spdlog/spdlog.h>

#include "epp/scheduler/config_plugins.h"

namespace llmd::epp::upstream {
namespace {

constexpr std::string_view kFlowControlWhy =
    "this EPP has no flow-control layer (priority bands, fairness and ordering policies, usage "
    "limits); requests wait under saturation in its router queue instead: `routerQueue` in the "
    "EPP config file (ordering fcfs, lcfs, wspt or slo-deadline, a saturation threshold, a "
    "bound and a timeout)";
constexpr std::string_view kSaturationWhy =
    "this EPP has no saturation detector plugin (upstream's utilization-detector drops "
    "sheddable requests while every pod is over its queue or KV threshold); here "
    "latency-slo-admitter sheds sheddable requests no pod is predicted to serve in time, and "
    "requests wait under saturation in the router queue (`routerQueue` in the EPP config file, "
    "its routerQueueThreshold)";

constexpr std::pair<std::string_view, std::string_view> kRefusedTypes[] = {
    // Parsers: the EPP reads OpenAI JSON itself (epp/plugins/parser/openai).
    {"vllmgrpc-parser",
     "the model servers' vLLM gRPC protocol: this EPP speaks HTTP/JSON "
     "(OpenAI) to them"},
    {"passthrough-parser",
     "this EPP reads every request body as OpenAI JSON (its prefix and "
     "latency plugins need the prompt) and answers 400 to a body it "
     "cannot read instead of forwarding it uninterpreted"},
    {"anthropic-parser", "Anthropic Messages bodies are not read; the EPP serves the OpenAI API"},
    {"vllmhttp-parser", "vLLM's /inference/v1/generate (pre-tokenized prompts) is not served"},
    {"sglanghttp-parser", "SGLang's native /generate is not served"},
    {"vertexai-parser", "Vertex AI's gRPC API is not served"},
    // Flow control and saturation.
    {"global-strict-fairness-policy", kFlowControlWhy},
    {"round-robin-fairness-policy", kFlowControlWhy},
    {"fcfs-ordering-policy", kFlowControlWhy},
    {"edf-ordering-policy", kFlowControlWhy},
    {"slo-deadline-ordering-policy", kFlowControlWhy},
    {"static-usage-limit-policy", kFlowControlWhy},
    {"utilization-detector", kSaturationWhy},
    {"concurrency-detector", kSaturationWhy},
    // Profile handlers other than single-profile-handler.
    {"pd-profile-handler",
     "prefill/decode disaggregation is not scheduled here (one profile "
     "per request: single-profile-handler)"},
    {"disagg-profile-handler",
     "disaggregated serving is not scheduled here (one profile per "
     "request: single-profile-handler)"},
    {"data-parallel-profile-handler", "one profile per request here: single-profile-handler"},
    {"header-profile-handler", "one profile per request here: single-profile-handler"},
    {"prefill-header-handler", "prefill/decode disaggregation is not scheduled here"},
    {"disagg-headers-handler", "prefill/decode disaggregation is not scheduled here"},
    {"always-disagg-pd-decider", "prefill/decode disaggregation is not scheduled here"},
    {"prefix-based-pd-decider", "prefill/decode disaggregation is not scheduled here"},
    // Scheduling plugins this EPP does not have.
    {"random-picker",
     "use weighted-random-picker (all scores 0 pick uniformly) or "
     "round-robin-picker"},
    {"running-requests-size-scorer",
     "not implemented; queue-scorer and the latency-scorer's "
     "composite read the pods' scraped load"},
    {"lora-affinity-scorer", "this EPP keeps no LoRA adapter state"},
    {"token-load-scorer",
     "not implemented; latency-scorer with indistinctPredictions: "
     "prefill-work ranks by the prompt tokens in flight"},
    {"active-request-scorer",
     "not implemented; the EPP's exact in-flight counts feed "
     "latency-scorer (idle pods first) and the router queue"},
    {"session-affinity-scorer", "session affinity is not implemented"},
    {"session-affinity-filter", "session affinity is not implemented"},
    {"load-aware-scorer", "not implemented; use queue-scorer or latency-scorer"},
    {"no-hit-lru-scorer", "not implemented"},
    {"precise-prefix-cache-scorer",
     "the EPP's prefix index is approximate "
     "(approx-prefix-cache-producer, prefix-cache-scorer)"},
    {"inflight-load-producer",
     "the EPP counts each pod's in-flight requests and prefill tokens "
     "itself, exactly, for every plugin: no producer is needed"},
    {"predicted-latency-scorer",
     "GIE's older all-in-one plugin; list predicted-latency-producer,"
     " latency-slo-admitter, the filters and latency-scorer instead"},
    {"k8s-notification-source",
     "pods come from the EPP's own discovery (the pool or "
     "Kubernetes flags)"},
    {"endpoint-notification-source", "pods come from the EPP's own discovery"},
    {"request-attribute-reporter", "per-request attribute reporting is not implemented"},
    {"header-based-testing-filter", "upstream's conformance-test plugin"},
    {"destination-endpoint-served-verifier", "upstream's conformance-test plugin"},
};

// Keys of `map` outside `allowed`: "" or the error.
std::string only_keys(const nlohmann::json& map, std::initializer_list<std::string_view> allowed,
                      const std::string& where) {
  if (!map.is_object()) {
    return where + " must be a mapping";
  }
  for (const auto& [k, v] : map.items()) {
    if (std::find(allowed.begin(), allowed.end(), k) == allowed.end()) {
      return where + ": unknown key '" + k + "'";
    }
  }
  return {};
}

std::optional<bool> parse_bool(std::string v) {
  std::transform(v.begin(), v.end(), v.begin(), [](unsigned char c) { return std::tolower(c); });
  if (v == "true" || v == "t" || v == "1") {
    return true;
  }
  if (v == "false" || v == "f" || v == "0") {
    return false;
  }
  return std::nullopt;
}

template <class T>
std::shared_ptr<const T> plugin_as(const std::map<std::string, PluginPtr>& plugins,
                                   const std::string& name) {
  auto it = plugins.find(name);
  return it == plugins.end() ? nullptr : std::dynamic_pointer_cast<const T>(it->second);
}

// One parser reference: the plugin must be a RequestParser. Upstream adds a default
// openai-parser when the name is not among the plugins, so `openai-parser` needs no entry.
std::string check_parser(const nlohmann::json& ref, const std::string& where,
                         const std::map<std::string, PluginPtr>& plugins, SectionsResult& out) {
  if (auto e = only_keys(ref, {"pluginRef"}, where); !e.empty()) {
    return e;
  }
  const auto name = ref.value("pluginRef", std::string());
  if (name.empty()) {
    return where + ": 'pluginRef' is required";
  }
  if (plugins.count(name) == 0) {
    return name == "openai-parser" ? std::string()
                                   : where + ": pluginRef '" + name + "' names no plugin";
  }
  if (!plugin_as<RequestParser>(plugins, name)) {
    return where + ": plugin '" + name + "' is not a parser";
  }
  out.used.insert(name);
  return {};
}

// The one metrics source and its extractor, into out.scrape.
std::string use_source(const std::string& source, const std::string& extractor,
                       const std::map<std::string, PluginPtr>& plugins, SectionsResult& out) {
  if (plugins.count(source) != 0) {
    auto s = plugin_as<MetricsDataSource>(plugins, source);
    if (!s) {
      return "dataLayer: plugin '" + source + "' is not a metrics-data-source";
    }
    out.scrape.scheme = s->target().scheme;
    out.scrape.path = s->target().path;
    out.scrape.insecure_skip_verify = s->target().insecure_skip_verify;
    out.used.insert(source);
  }
  if (plugins.count(extractor) != 0) {
    auto x = plugin_as<MetricsExtractor>(plugins, extractor);
    if (!x) {
      return "dataLayer: plugin '" + extractor + "' is not a core-metrics-extractor";
    }
    out.scrape.engine_label_key = x->engines().engine_label_key;
    out.scrape.default_engine = x->engines().default_engine;
    out.scrape.engines = x->engines().engines;
    out.used.insert(extractor);
  }
  return {};
}

std::string apply_data_layer(const Sections& s, const std::map<std::string, PluginPtr>& plugins,
                             SectionsResult& out) {
  const nlohmann::json& dl = s.data_layer;
  if (s.gates.legacy_metrics) {
    // Upstream then polls with its legacy metric flags, whose defaults are vLLM's names at
    // http /metrics: the built-in defaults here. The data-layer plugins and section are unused.
    spdlog::warn(
        "featureGates enableLegacyMetrics: pods are scraped with the built-in vLLM "
        "defaults (http, /metrics); the dataLayer section and data-layer plugins are "
        "not used");
    return {};
  }
  if (dl.is_null()) {
    // Upstream's defaults: the plugins named after the two types, else their defaults.
    return use_source("metrics-data-source", "core-metrics-extractor", plugins, out);
  }
  if (auto e = only_keys(dl,
                         {"sources", "injectDefaults", "discovery", "peerDiscovery",
                          "crossReplicaSyncerPluginRef", "crossReplicaSyncInterval"},
                         "dataLayer");
      !e.empty()) {
    return e;
  }
  if (dl.contains("discovery")) {
    return "dataLayer.discovery: not supported: the pods come from the EPP config file's pool or "
           "from Kubernetes (--pool-name / --pool-selector)";
  }
  if (dl.contains("peerDiscovery") || dl.contains("crossReplicaSyncerPluginRef") ||
      dl.contains("crossReplicaSyncInterval")) {
    return "dataLayer: peerDiscovery and the cross-replica syncer are not supported: replicas "
           "of this EPP share in-flight counts by their own peer reports";
  }
  const nlohmann::json sources = dl.value("sources", nlohmann::json::array());
  const bool inject = dl.value("injectDefaults", true);
  if (!sources.is_array()) {
    return "dataLayer.sources must be a list";
  }
  if (sources.empty()) {
    // llm-d injects the default source unless told not to; GIE reads an empty section as
    // "collect no metrics".
    if (s.api_version == kLlmdApiVersion && inject) {
      return use_source("metrics-data-source", "core-metrics-extractor", plugins, out);
    }
    return "dataLayer: no sources means no metrics collection upstream; this EPP needs the "
           "pods' metrics (a pod is a candidate only while its scrape is fresh): list one "
           "metrics-data-source with one core-metrics-extractor";
  }
  if (sources.size() > 1) {
    return "dataLayer.sources: one source is supported (a metrics-data-source with one "
           "core-metrics-extractor), got " +
           std::to_string(sources.size());
  }
  const nlohmann::json& src = sources[0];
  if (auto e = only_keys(src, {"pluginRef", "extractors"}, "dataLayer.sources[0]"); !e.empty()) {
    return e;
  }
  const auto ref = src.value("pluginRef", std::string());
  const nlohmann::json extractors = src.value("extractors", nlohmann::json::array());
  if (ref.empty() || plugins.count(ref) == 0) {
    return "dataLayer.sources[0]: pluginRef '" + ref + "' names no plugin";
  }
  if (!extractors.is_array() || extractors.size() != 1 || !extractors[0].is_object()) {
    return "dataLayer.sources[0].extractors: exactly one core-metrics-extractor is supported";
  }
  if (auto e = only_keys(extractors[0], {"pluginRef"}, "dataLayer.sources[0].extractors[0]");
      !e.empty()) {
    return e;
  }
  const auto x = extractors[0].value("pluginRef", std::string());
  if (x.empty() || plugins.count(x) == 0) {
    return "dataLayer.sources[0].extractors[0]: pluginRef '" + x + "' names no plugin";
  }
  return use_source(ref, x, plugins, out);
}

}  // namespace

std::string check_type_meta(const nlohmann::json& api_version, const nlohmann::json& kind) {
  if (api_version.is_null() && kind.is_null()) {
    return {};
  }
  if (api_version.is_null() || kind.is_null()) {
    return "apiVersion and kind go together (an EndpointPickerConfig names both)";
  }
  if (!api_version.is_string() ||
      (api_version != kGieApiVersion && api_version != kLlmdApiVersion)) {
    return "apiVersion " + api_version.dump() +
           " is not supported (accepted: " + std::string(kGieApiVersion) + ", " +
           std::string(kLlmdApiVersion) + ")";
  }
  if (kind != kKind) {
    return "kind " + kind.dump() + " is not supported (expected " + std::string(kKind) + ")";
  }
  return {};
}

std::optional<std::string_view> refused_plugin_type(std::string_view type) {
  for (const auto& [t, why] : kRefusedTypes) {
    if (t == type) {
      return why;
    }
  }
  return std::nullopt;
}

std::string parse_feature_gates(const nlohmann::json& gates, FeatureGates& out) {
  if (gates.is_null()) {
    return {};
  }
  if (!gates.is_array()) {
    return "featureGates must be a list of gate names";
  }
  for (const auto& g : gates) {
    if (!g.is_string()) {
      return "featureGates: " + g.dump() + " is not a gate name";
    }
    std::string name = g.get<std::string>();
    bool on = true;
    if (auto eq = name.find('='); eq != std::string::npos) {
      auto v = parse_bool(name.substr(eq + 1));
      if (!v) {
        return "featureGates: '" + name + "': the value after '=' must be true or false";
      }
      on = *v;
      name.resize(eq);
    }
    if (name == "dataLayer") {
      continue;  // GIE v1.5.0: deprecated, a no-op (the data layer is always on)
    }
    if (name == "enableLegacyMetrics") {
      out.legacy_metrics = on;
    } else if (name == "flowControl") {
      if (on) {
        return "featureGates: flowControl is not supported: " + std::string(kFlowControlWhy);
      }
    } else if (name == "haPopulateNonLeaderDatastore") {
      if (!on) {
        return "featureGates: haPopulateNonLeaderDatastore=false is not supported: a standby "
               "replica of this EPP always keeps its pods and their metrics current, so that it "
               "serves at once when it takes the lease";
      }
    } else {
      return "featureGates: unknown gate '" + name +
             "' (known: dataLayer, enableLegacyMetrics, flowControl, "
             "haPopulateNonLeaderDatastore)";
    }
  }
  return {};
}

std::string apply_sections(const Sections& s, const std::map<std::string, PluginPtr>& plugins,
                           SectionsResult& out) {
  if (!s.saturation_detector.is_null()) {
    return "saturationDetector is not supported: " + std::string(kSaturationWhy);
  }
  if (!s.flow_control.is_null()) {
    return "flowControl is not supported: " + std::string(kFlowControlWhy);
  }
  if (s.parser.is_null() && s.request_handler.is_null()) {
    // Upstream's default parser is the plugin named openai-parser (made when not listed).
    if (auto e = check_parser({{"pluginRef", "openai-parser"}}, "parser", plugins, out);
        !e.empty()) {
      return e;
    }
  }
  if (!s.parser.is_null()) {
    if (auto e = check_parser(s.parser, "parser", plugins, out); !e.empty()) {
      return e;
    }
  }
  if (!s.request_handler.is_null()) {
    if (auto e = only_keys(s.request_handler, {"parsers"}, "requestHandler"); !e.empty()) {
      return e;
    }
    const auto parsers = s.request_handler.value("parsers", nlohmann::json::array());
    if (!parsers.is_array()) {
      return "requestHandler.parsers must be a list";
    }
    for (std::size_t i = 0; i < parsers.size(); ++i) {
      const auto where = "requestHandler.parsers[" + std::to_string(i) + "]";
      if (auto e = check_parser(parsers[i], where, plugins, out); !e.empty()) {
        return e;
      }
    }
  }
  if (auto e = apply_data_layer(s, plugins, out); !e.empty()) {
    return e;
  }
  return out.scrape.validate();
}

}  // namespace llmd::epp::upstream
