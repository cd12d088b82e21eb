#include "epp/discovery/objective_tracker.h"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "epp/discovery/kube_reader.h"

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

const Json& object_at(const Json& j, const char* key) {
  static const Json kNone = Json::object();
  if (!j.is_object()) {
    return kNone;
  }
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? *it : kNone;
}

bool is_int32(const Json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= static_cast<uint64_t>(INT32_MAX);
  }
  return v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX;
}

}  // namespace

std::optional<InferenceObjectiveSpec> inference_objective_of(const Json& object,
                                                             std::string& error) {
  const Json& meta = object_at(object, "metadata");
  const Json& spec = object_at(object, "spec");
  const Json& ref = object_at(spec, "poolRef");
  InferenceObjectiveSpec out;
  out.objective.name = string_at(meta, "name");
  if (out.objective.name.empty()) {
    error = "an InferenceObjective without metadata.name";
    return std::nullopt;
  }
  const std::string where = "InferenceObjective " + out.objective.name;
  out.pool_name = string_at(ref, "name");
  if (out.pool_name.empty()) {
    error = where + ": spec.poolRef.name is required";
    return std::nullopt;
  }
  out.pool_group = ref.contains("group") ? string_at(ref, "group") : kDefaultPoolRefGroup;
  if (const auto p = spec.find("priority"); p != spec.end() && !p->is_null()) {
    if (!is_int32(*p)) {
      error = where + ": spec.priority must be a 32-bit integer, got " + p->dump();
      return std::nullopt;
    }
    out.objective.priority = p->get<int64_t>();
  }
  const auto deletion = meta.find("deletionTimestamp");
  out.deleting = deletion != meta.end() && !deletion->is_null();
  return out;
}

std::optional<ClusterObjective> ObjectiveTracker::ours(const Json& object,
                                                       std::vector<std::string>& warnings) const {
  std::string error;
  auto spec = inference_objective_of(object, error);
  if (!spec) {
    warnings.push_back(error + "; ignored");
    return std::nullopt;
  }
  if (spec->deleting || spec->pool_name != pool_name_ || spec->pool_group != pool_group_) {
    return std::nullopt;
  }
  return spec->objective;
}

bool ObjectiveTracker::replace_all(const Json& list, std::vector<std::string>& warnings) {
  std::map<std::string, ClusterObjective> next;
  if (auto items = list.find("items"); items != list.end() && items->is_array()) {
    for (const auto& item : *items) {
      if (auto o = ours(item, warnings)) {
        next[o->name] = std::move(*o);
      }
    }
  }
  resource_version_ = string_at(object_at(list, "metadata"), "resourceVersion");
  const bool changed = next != by_name_;
  by_name_ = std::move(next);
  return changed;
}

ObjectiveTracker::Outcome ObjectiveTracker::apply(const Json& event,
                                                  std::vector<std::string>& warnings) {
  const std::string type = string_at(event, "type");
  if (type == "ERROR" || !event.is_object() || !event.contains("object") ||
      !event["object"].is_object()) {
    return Outcome::kRelist;  // 410 Gone (a Status object) or an unusable event
  }
  const Json& object = event["object"];
  if (auto rv = resource_version_of(object); !rv.empty()) {
    resource_version_ = rv;
  }
  if (type == "BOOKMARK") {
    return Outcome::kUnchanged;
  }
  const std::string name = string_at(object_at(object, "metadata"), "name");
  if (name.empty() || (type != "ADDED" && type != "MODIFIED" && type != "DELETED")) {
    return Outcome::kRelist;
  }
  // An edit that points an objective at another pool removes it from ours, as upstream does.
  std::optional<ClusterObjective> now = type == "DELETED" ? std::nullopt : ours(object, warnings);
  auto it = by_name_.find(name);
  if (!now) {
    if (it == by_name_.end()) {
      return Outcome::kUnchanged;
    }
    by_name_.erase(it);
    return Outcome::kChanged;
  }
  if (it != by_name_.end() && it->second == *now) {
    return Outcome::kUnchanged;
  }
  by_name_[name] = std::move(*now);
  return Outcome::kChanged;
}

std::vector<ClusterObjective> ObjectiveTracker::objectives() const {
  std::vector<ClusterObjective> out;
  out.reserve(by_name_.size());
  for (const auto& [name, o] : by_name_) {
    out.push_back(o);
  }
  return out;
}

}  // namespace llmd::epp::discovery
