#pragma once
// Inference objectives (the Gateway API Inference Extension's InferenceObjective, by name):
// a request names one with the header x-llm-d-inference-objective (or its old name
// x-gateway-inference-objective) and inherits its priority, strict tier and default SLOs.
// Explicit request values win over the objective's:
//   priority:        x-dynamo-request-priority header > nvext.agent_hints.priority > objective > 0
//   strict tier:     x-dynamo-request-strict-priority > nvext.agent_hints.strict_priority >
//   objective > 0 SLOs:            x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms headers (or
//   x-slo-ttft-ms /
//                    x-slo-tpot-ms) > objective's sloTtftMs / sloTpotMs
// Sheddable = effective priority < 0 (the latency-slo-admitter may answer 429).
//
//   objectives:
//   - name: interactive
//     priority: 10
//     sloTtftMs: 500
//     sloTpotMs: 50
//   - name: batch
//     priority: -1        # sheddable
//
// An unknown objective name behaves as no objective (as in the Inference Extension), logged at
// debug level and counted by the caller. Immutable after parsing; shared by reference.
//
// With Kubernetes discovery the cluster's InferenceObjective objects of the pool join the
// table (with_cluster): a cluster objective sets the priority of its name (spec.priority; unset
// = the file's priority for that name, else 0, as upstream treats unset); the file's
// strictPriority and SLO defaults of the same name stay (the CRD has no such fields).
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

namespace llmd::epp {

struct Objective {
  std::string name;
  int64_t priority = 0;
  int64_t strict_priority = 0;
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
};

// An objective as the cluster declares it (an InferenceObjective of the pool).
struct ClusterObjective {
  std::string name;
  std::optional<int64_t> priority;  // spec.priority; nullopt = unset
  bool operator==(const ClusterObjective&) const = default;
};

class ObjectiveTable {
 public:
  ObjectiveTable() = default;
  // `doc` is the `objectives` list (null = none). Errors name the entry and the key.
  static std::variant<ObjectiveTable, std::string> parse(const nlohmann::json& doc);

  // This table with the cluster's objectives laid over it (see above).
  ObjectiveTable with_cluster(const std::vector<ClusterObjective>& cluster) const;

  const Objective* find(const std::string& name) const;
  std::size_t size() const { return by_name_.size(); }

 private:
  std::map<std::string, Objective> by_name_;
};

}  // namespace llmd::epp
