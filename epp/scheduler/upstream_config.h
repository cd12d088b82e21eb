#pragma once
// Upstream's EndpointPickerConfig keys beside `plugins` and `schedulingProfiles` (GIE v1.5.0
// apix/config/v1alpha1, llm-d-router's): apiVersion/kind, featureGates, parser, requestHandler,
// dataLayer, saturationDetector, flowControl. Each is mapped onto what this EPP does or refused
// with an error naming the key and why (docs/coming-from-upstream.md); none is ignored.
// Also the upstream plugin types this EPP does not have, each with why. Load-time only.
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/datastore/scrape_config.h"
#include "epp/interface/plugin.h"

namespace llmd::epp::upstream {

inline constexpr std::string_view kGieApiVersion = "inference.networking.x-k8s.io/v1alpha1";
inline constexpr std::string_view kLlmdApiVersion = "llm-d.ai/v1alpha1";
inline constexpr std::string_view kKind = "EndpointPickerConfig";

// The document's `apiVersion` and `kind` (both absent: our own documents): "" when accepted,
// else the error naming the key.
std::string check_type_meta(const nlohmann::json& api_version, const nlohmann::json& kind);

// Why this EPP refuses an upstream plugin type it does not have; nullopt for a type upstream
// does not know either.
std::optional<std::string_view> refused_plugin_type(std::string_view type);

// featureGates: a list of names, llm-d's "name=true|false" included.
struct FeatureGates {
  bool legacy_metrics = false;  // GIE's enableLegacyMetrics
};
// "" or the error naming the gate.
std::string parse_feature_gates(const nlohmann::json& gates, FeatureGates& out);

// The top-level sections, read after the plugins were made. `plugins` by instance name.
struct Sections {
  nlohmann::json api_version, parser, request_handler, data_layer, saturation_detector,
      flow_control;
  FeatureGates gates;
};
struct SectionsResult {
  ScrapeConfig scrape;
  std::set<std::string> used;  // instances a section uses (not expected in any profile)
};
// "" or the error naming the key.
std::string apply_sections(const Sections& s, const std::map<std::string, PluginPtr>& plugins,
                           SectionsResult& out);

}  // namespace llmd::epp::upstream
