#include "epp/discovery/pod_tracker.h"

#include <nlohmann/json.hpp>

namespace llmd::epp::discovery {
namespace {

using Json = nlohmann::json;

std::string string_at(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

const Json* object_at(const Json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_object() ? &*it : nullptr;
}

bool same(const PodConfig& a, const PodConfig& b) {
  return a.name == b.name && a.address == b.address && a.labels == b.labels;
}

}  // namespace

std::optional<PodConfig> PodTracker::endpoint_of(const Json& pod) const {
  if (!pod.is_object()) {
    return std::nullopt;
  }
  const Json* meta = object_at(pod, "metadata");
  const Json* status = object_at(pod, "status");
  if (meta == nullptr || status == nullptr) {
    return std::nullopt;
  }
  PodConfig p;
  p.name = string_at(*meta, "name");
  const std::string ip = string_at(*status, "podIP");
  if (p.name.empty() || ip.empty() || string_at(*status, "phase") != "Running" ||
      meta->contains("deletionTimestamp")) {
    return std::nullopt;
  }
  bool ready = false;
  if (auto c = status->find("conditions"); c != status->end() && c->is_array()) {
    for (const auto& cond : *c) {
      if (cond.is_object() && string_at(cond, "type") == "Ready") {
        ready = string_at(cond, "status") == "True";
      }
    }
  }
  if (!ready) {
    return std::nullopt;
  }
  // IPv6 pod IPs need brackets in host:port.
  p.address = (ip.find(':') != std::string::npos ? "[" + ip + "]" : ip) + ":" +
              std::to_string(target_ports_.front());
  if (const Json* labels = object_at(*meta, "labels")) {
    for (const auto& [k, v] : labels->items()) {
      // `pool` names a pool of model-level routing rules in the EPP; a Kubernetes label of
      // that name means something else: every discovered pod is in the discovered pool.
      if (v.is_string() && k != "pool") {
        p.labels[k] = v.get<std::string>();
      }
    }
  }
  return p;
}

bool PodTracker::replace_all(const Json& pod_list) {
  std::map<std::string, PodConfig> next;
  if (auto items = pod_list.find("items"); items != pod_list.end() && items->is_array()) {
    for (const auto& pod : *items) {
      if (auto p = endpoint_of(pod)) {
        next[p->name] = std::move(*p);
      }
    }
  }
  if (const Json* meta = object_at(pod_list, "metadata")) {
    resource_version_ = string_at(*meta, "resourceVersion");
  }
  const bool changed =
      next.size() != ready_.size() ||
      !std::equal(next.begin(), next.end(), ready_.begin(),
                  [](const auto& a, const auto& b) { return same(a.second, b.second); });
  ready_ = std::move(next);
  return changed;
}

PodTracker::Outcome PodTracker::apply(const Json& event) {
  if (!event.is_object()) {
    return Outcome::kRelist;
  }
  const std::string type = string_at(event, "type");
  const Json* object = object_at(event, "object");
  if (type == "ERROR") {
    // A Status object; 410 Gone: the resourceVersion is too old. Anything else: start over too.
    return Outcome::kRelist;
  }
  if (object == nullptr) {
    return Outcome::kRelist;
  }
  if (const Json* meta = object_at(*object, "metadata")) {
    if (auto rv = string_at(*meta, "resourceVersion"); !rv.empty()) {
      resource_version_ = rv;
    }
  }
  if (type == "BOOKMARK") {
    return Outcome::kUnchanged;
  }
  const Json* meta = object_at(*object, "metadata");
  const std::string name = meta != nullptr ? string_at(*meta, "name") : std::string();
  if (name.empty() || (type != "ADDED" && type != "MODIFIED" && type != "DELETED")) {
    return Outcome::kRelist;
  }
  std::optional<PodConfig> now = type == "DELETED" ? std::nullopt : endpoint_of(*object);
  auto it = ready_.find(name);
  if (!now) {
    if (it == ready_.end()) {
      return Outcome::kUnchanged;
    }
    ready_.erase(it);
    return Outcome::kChanged;
  }
  if (it != ready_.end() && same(it->second, *now)) {
    return Outcome::kUnchanged;
  }
  ready_[name] = std::move(*now);
  return Outcome::kChanged;
}

std::vector<PodConfig> PodTracker::endpoints() const {
  std::vector<PodConfig> out;
  out.reserve(ready_.size() * target_ports_.size());
  for (const auto& [name, p] : ready_) {
    if (target_ports_.size() == 1) {
      out.push_back(p);
      continue;
    }
    const std::string host = p.address.substr(0, p.address.rfind(':'));
    for (std::size_t i = 0; i < target_ports_.size(); ++i) {
      PodConfig rank = p;
      rank.name = name + "-rank-" + std::to_string(i);
      rank.address = host + ":" + std::to_string(target_ports_[i]);
      out.push_back(std::move(rank));
    }
  }
  return out;
}

}  // namespace llmd::epp::discovery
