#pragma once
// Kubernetes discovery of the pool's InferenceObjectives (with an InferencePool only): list +
// watch the InferenceObjective objects of the pool's namespace, keep those whose poolRef names
// the pool (objective_tracker.h), and publish their names and priorities whenever they change
// (the app lays them over the config file's objectives: epp/objectives/objectives.h).
//
// - Both groups that define the CRD are read, each on a thread of its own:
//   inference.networking.x-k8s.io/v1alpha2 (Gateway API Inference Extension v1.5.0) and
//   llm-d.ai/v1alpha2 (llm-d-router). When both declare an objective of the same name, the
//   llm-d.ai one wins (the current group, as x-llm-d-* headers win over their old names).
//   The first set is published once both groups were listed (or failed to be), so the
//   losing group's priority is never seen in between.
// - A group the API server does not serve (404: the CRD is not installed) or the EPP may not
//   read (403: RBAC) is logged once and checked again every minute; its objectives are dropped.
// - The pool's API group (for poolRef.group) is the one PodDiscovery read the pool from; the
//   watch starts once that is known. A watch resumes from the last resourceVersion (bookmarks
//   keep it fresh); 410 Gone or a broken stream re-lists; errors back off from 1 s to 10 s. A
//   watch silent for watch_timeout + 5 s and not closed is a broken stream too, listed again
//   at once (kube_reader.h).
//
// Threading: one thread per group from start() to stop(); `publish` runs on those threads, one
// at a time, with the merged list (by name).
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "epp/discovery/kube_api_client.h"
#include "epp/objectives/objectives.h"

namespace llmd::epp::discovery {

struct ObjectiveDiscoveryOptions {
  KubeApiOptions api;
  std::string pool_namespace;  // the pool's (resolved, never "")
  std::string pool_name;
  // The InferencePool's API group, "" while unknown (PodDiscovery::pool_group). Thread-safe.
  std::function<std::string()> pool_group;
  std::chrono::seconds watch_timeout{300};    // timeoutSeconds of each watch
  std::chrono::seconds unserved_recheck{60};  // after a 404 or 403
};

class ObjectiveDiscovery {
 public:
  using Publish = std::function<void(const std::vector<ClusterObjective>& objectives)>;
  ObjectiveDiscovery(ObjectiveDiscoveryOptions options, Publish publish);
  ~ObjectiveDiscovery();
  ObjectiveDiscovery(const ObjectiveDiscovery&) = delete;
  ObjectiveDiscovery& operator=(const ObjectiveDiscovery&) = delete;

  void start();
  void stop();  // idempotent; interrupts a watch in progress

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmd::epp::discovery
