#pragma once
// What discovery reads from an InferencePool: the label selector that names its pods and the
// ports they serve on. Pure (no I/O): the discovery loop feeds it the JSON the API server sends
// for the pool (a GET or a watch event) and logs describe_change() when an edit arrives.
//
// inference.networking.k8s.io/v1: spec.selector.matchLabels, spec.targetPorts[].number (one port
// per serving process of a pod, e.g. a data-parallel rank). The older
// inference.networking.x-k8s.io/v1alpha2: spec.selector (labels), spec.targetPortNumber.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace llmd::epp::discovery {

struct PoolSpec {
  std::map<std::string, std::string> selector;  // pod labels, all required
  std::vector<uint16_t> ports;                  // never empty
  bool operator==(const PoolSpec& o) const { return selector == o.selector && ports == o.ports; }
  bool operator!=(const PoolSpec& o) const { return !(*this == o); }
};

// The spec of an InferencePool object (either version). A pool without targetPorts serves on
// `default_port`. nullopt, with `error` saying why, when the pool selects no labels: listing
// every pod of the namespace is never what an operator meant.
std::optional<PoolSpec> pool_spec_of(const nlohmann::json& pool, uint16_t default_port,
                                     std::string& error);

// "k=v,k2=v2" as written (sorted by key); the URL query form is encoded separately.
std::string selector_text(const std::map<std::string, std::string>& selector);

// "selects app=vllm on port 8000" / "selects app=vllm on ports 8000, 8001".
std::string describe(const PoolSpec& spec);
// Only what differs: "selector app=a -> app=b; ports 8000 -> 8000, 8001" ("" when equal).
std::string describe_change(const PoolSpec& before, const PoolSpec& after);

}  // namespace llmd::epp::discovery
