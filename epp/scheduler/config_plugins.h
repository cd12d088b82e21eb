#pragma once
// Plugins that configure the EPP instead of taking part in a scheduling cycle: upstream's
// EndpointPickerConfig lists them under `plugins` like the others. The loader sorts them by
// these interfaces once, at load time, and hands what they say to the component they configure
// (LoadResult: the scraper's ScrapeConfig, the pods' role label); nothing calls them per request.
// Immutable after creation.
#include <string>
#include <vector>

#include "epp/datastore/scrape_config.h"
#include "epp/interface/plugin.h"

namespace llmd::epp {

// Upstream's data-layer source: where the pods' metrics are fetched (`metrics-data-source`).
class MetricsDataSource : public Plugin {
 public:
  struct Target {
    std::string scheme = "http";
    std::string path = "/metrics";
    bool insecure_skip_verify = true;
  };
  virtual const Target& target() const = 0;
};

// Upstream's data-layer extractor: how an engine's exposition is read (`core-metrics-extractor`).
class MetricsExtractor : public Plugin {
 public:
  struct Engines {
    std::string engine_label_key = std::string(ScrapeConfig::kDefaultEngineLabel);
    std::string default_engine = "vllm";
    std::vector<EngineMapping> engines = builtin_engines();
  };
  virtual const Engines& engines() const = 0;
};

// Upstream's request parser (`parser`, `requestHandler.parsers`): the format of request bodies.
// This EPP reads OpenAI bodies itself; the only parser is `openai-parser`, which says so.
class RequestParser : public Plugin {};

// Upstream's profile handler: which profiles run for a request. The only one is
// `single-profile-handler`: one profile, which is the primary.
class ProfileHandler : public Plugin {};

// A plugin that names the pod label holding a pod's role (prefill | decode), for the whole EPP:
// the predictions, the training samples and TPOT neutralisation must agree on it.
class EndpointRoleLabel {
 public:
  virtual ~EndpointRoleLabel() = default;
  virtual const std::string& endpoint_role_label() const = 0;
};

}  // namespace llmd::epp
