#pragma once
// Kubernetes discovery of the pool's pods (gateway mode): list + watch the pods that the
// InferencePool's selector (or an explicit label selector) names, through the API server, and
// publish the ready endpoints whenever they change (main wires it to PodRegistry::set_pods).
//
// - In a cluster: https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT, the service
//   account's bearer token (re-read for each request: it rotates) and CA certificate, the
//   namespace from its namespace file unless given. `api_url` (http or https) overrides the
//   address, e.g. for `kubectl proxy` or tests.
// - InferencePool (pool_spec.h: v1 or v1alpha2, whichever the API server serves): read, then
//   watched on a connection of its own. An edit of its selector or targetPorts interrupts the
//   pod watch, re-lists the pods the pool selects now and watches those (logged as
//   "changed: selector a -> b; ports x -> y"). A deleted pool keeps its last pods as endpoints
//   until it is created again.
// - A watch resumes from the last resourceVersion (bookmarks keep it fresh); 410 Gone or a
//   broken stream re-lists; errors back off from 1 s to 10 s. A watch that sends nothing for
//   watch_timeout + 5 s (not even a bookmark) and is not closed is a broken stream too, read
//   again at once (kube_reader.h). Everything read is bounded (line length, pods per list).
//
// Threading: two threads of its own from start() to stop(), one watching the pool (only with
// --pool-name) and one the pods; publish runs on the pods' thread. The HTTP/TLS client is
// epp/discovery/kube_reader.h (one per thread). The pool's InferenceObjectives are
// objective_discovery.h's.
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "epp/datastore/pod_registry.h"

namespace llmd::epp::discovery {

inline constexpr char kPoolGroupV1[] = "inference.networking.k8s.io";
inline constexpr char kPoolGroupV1Alpha2[] = "inference.networking.x-k8s.io";

struct DiscoveryOptions {
  std::string api_url;  // "" = in-cluster
  std::string token_file = "/var/run/secrets/kubernetes.io/serviceaccount/token";
  std::string ca_file = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt";
  std::string namespace_file = "/var/run/secrets/kubernetes.io/serviceaccount/namespace";
  std::string pool_namespace;                   // "" = the service account's namespace
  std::string pool_name;                        // an InferencePool; "" = use `selector`
  std::map<std::string, std::string> selector;  // pod labels (without an InferencePool)
  uint16_t target_port = 8000;                  // pods' serving port (an InferencePool's port wins)
  // Selector mode: the pods' serving ports, one endpoint per pod and port (empty: target_port).
  std::vector<uint16_t> target_ports;
  // The InferencePool's API group: inference.networking.k8s.io (v1) or
  // inference.networking.x-k8s.io (v1alpha2); "" = v1, else v1alpha2 if v1 has no such pool.
  std::string pool_group;
  // timeoutSeconds of each watch (the config file's discovery.watchTimeoutSeconds); a watch
  // silent for 5 s longer is abandoned.
  std::chrono::seconds watch_timeout{300};
  std::size_t max_pods = 10000;
};

// "k=v,k2=v2" -> map; throws std::invalid_argument naming the bad part.
std::map<std::string, std::string> parse_selector(const std::string& text);

class PodDiscovery {
 public:
  using Publish = std::function<void(const std::vector<PodConfig>& endpoints)>;
  // Throws std::invalid_argument on options that cannot work (no pool and no selector, bad URL).
  PodDiscovery(DiscoveryOptions options, Publish publish);
  ~PodDiscovery();
  PodDiscovery(const PodDiscovery&) = delete;
  PodDiscovery& operator=(const PodDiscovery&) = delete;

  void start();
  void stop();  // idempotent; interrupts a watch in progress
  // The API group the InferencePool was read from (inference.networking.k8s.io for v1,
  // inference.networking.x-k8s.io for v1alpha2); "" before it was read, or without a pool.
  // Thread-safe.
  std::string pool_group() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp::discovery
