#pragma once
// PodTracker: the pool's endpoints as the Kubernetes API describes them, from a pod LIST and
// then WATCH events. Pure (no sockets, no threads, no clock): the discovery loop feeds it the
// JSON objects the API server sends and publishes endpoints() when apply() says they changed.
//
// A pod is an endpoint when it has an IP, its phase is Running, its Ready condition is "True"
// and it is not being deleted; the endpoint is PodConfig{name, "<podIP>:<target port>",
// labels} (except a `pool` label: the EPP's pool names are its own). Owned by one thread (the
// discovery loop).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp::discovery {

class PodTracker {
 public:
  explicit PodTracker(uint16_t target_port) : target_ports_{target_port} {}

  // A PodList (the answer to a LIST): replaces everything. Returns whether endpoints changed.
  bool replace_all(const nlohmann::json& pod_list);

  enum class Outcome {
    kUnchanged,  // nothing an endpoint depends on changed (or a BOOKMARK)
    kChanged,    // endpoints() changed
    kRelist,     // the watch is too old (410 Gone) or the event is unusable: LIST again
  };
  // One watch event {"type": ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, "object": {...}}.
  Outcome apply(const nlohmann::json& event);

  // The ready endpoints, by pod name: one per pod, or with several target ports one per pod
  // and port, named <pod>-rank-<i> in the ports' order.
  std::vector<PodConfig> endpoints() const;
  // Where the next watch resumes ("" before the first LIST).
  const std::string& resource_version() const { return resource_version_; }
  void set_target_port(uint16_t port) { target_ports_ = {port}; }
  // Empty keeps the current ports.
  void set_target_ports(const std::vector<uint16_t>& ports) {
    if (!ports.empty()) {
      target_ports_ = ports;
    }
  }

  // The endpoint a pod object describes, or nullopt when it is not ready to serve.
  std::optional<PodConfig> endpoint_of(const nlohmann::json& pod) const;

 private:
  std::vector<uint16_t> target_ports_;      // never empty; ready_ holds addresses on the first
  std::map<std::string, PodConfig> ready_;  // by pod name
  std::string resource_version_;
};

}  // namespace llmd::epp::discovery
