#pragma once
// ObjectiveTracker: the pool's InferenceObjectives as the Kubernetes API describes them, from a
// LIST and then WATCH events. Pure (no sockets, no threads): the discovery loop feeds it the
// JSON the API server sends and publishes objectives() when apply() says they changed.
//
// An InferenceObjective (GIE v1.5.0: inference.networking.x-k8s.io/v1alpha2; llm-d-router:
// llm-d.ai/v1alpha2; same schema) belongs to the pool when spec.poolRef.name is the pool's
// name and spec.poolRef.group (default inference.networking.k8s.io, as the CRD defaults it) is
// the pool's API group, as upstream's reconciler checks; poolRef.kind is not checked (nor is it
// upstream). Honoured: metadata.name (what a request's objective header names) and
// spec.priority (an int32; unset = unset). An object being deleted (deletionTimestamp) is gone.
// An object whose priority is not an int32 is left out with a warning (the API server's schema
// validation makes that rare). Owned by one thread (the discovery loop).
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "epp/objectives/objectives.h"

namespace llmd::epp::discovery {

inline constexpr char kDefaultPoolRefGroup[] = "inference.networking.k8s.io";

// What an InferenceObjective object says, before matching it to a pool.
struct InferenceObjectiveSpec {
  ClusterObjective objective;  // metadata.name, spec.priority
  std::string pool_name;       // spec.poolRef.name
  std::string pool_group;      // spec.poolRef.group (defaulted)
  bool deleting = false;       // metadata.deletionTimestamp is set
};

// nullopt with `error` set when the object is not a usable InferenceObjective (no name, no
// poolRef.name, a priority that is not an int32).
std::optional<InferenceObjectiveSpec> inference_objective_of(const nlohmann::json& object,
                                                             std::string& error);

class ObjectiveTracker {
 public:
  ObjectiveTracker(std::string pool_name, std::string pool_group)
      : pool_name_(std::move(pool_name)), pool_group_(std::move(pool_group)) {}

  // A LIST answer: replaces everything. Returns whether objectives() changed. Objects it could
  // not use are described in `warnings`.
  bool replace_all(const nlohmann::json& list, std::vector<std::string>& warnings);

  enum class Outcome { kUnchanged, kChanged, kRelist };  // as PodTracker's
  Outcome apply(const nlohmann::json& event, std::vector<std::string>& warnings);

  // The pool's objectives, by name.
  std::vector<ClusterObjective> objectives() const;
  // Where the next watch resumes ("" before the first LIST).
  const std::string& resource_version() const { return resource_version_; }

 private:
  // The objective `object` makes of this pool's, or nullopt (another pool's, being deleted,
  // unusable: then a warning).
  std::optional<ClusterObjective> ours(const nlohmann::json& object,
                                       std::vector<std::string>& warnings) const;

  std::string pool_name_;
  std::string pool_group_;
  std::map<std::string, ClusterObjective> by_name_;
  std::string resource_version_;
};

}  // namespace llmd::epp::discovery
