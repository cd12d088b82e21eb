#include "epp/objectives/objectives.h"

#include <cmath>

namespace llmd::epp {

std::variant<ObjectiveTable, std::string> ObjectiveTable::parse(const nlohmann::json& doc) {
  ObjectiveTable table;
  if (doc.is_null()) {
    return table;
  }
  if (!doc.is_array()) {
    return std::string("objectives: expected a list of {name, priority, sloTtftMs, sloTpotMs}");
  }
  for (std::size_t i = 0; i < doc.size(); ++i) {
    const auto& o = doc[i];
    std::string where = "objectives[" + std::to_string(i) + "]";
    if (!o.is_object()) {
      return where + ": expected a mapping";
    }
    Objective obj;
    if (!o.contains("name") || !o["name"].is_string() || o["name"].get<std::string>().empty()) {
      return where + ": 'name' (non-empty string) is required";
    }
    obj.name = o["name"].get<std::string>();
    where = "objective '" + obj.name + "'";
    for (const auto& [key, v] : o.items()) {
      if (key == "name") {
        continue;
      }
      if (key == "priority" || key == "strictPriority") {
        if (!v.is_number_integer()) {
          return where + ": '" + key + "' must be an integer, got " + v.dump();
        }
        int64_t n = v.get<int64_t>();
        if (key == "strictPriority" && n < 0) {
          return where + ": 'strictPriority' is an unsigned tier, got " + v.dump();
        }
        (key == "priority" ? obj.priority : obj.strict_priority) = n;
      } else if (key == "sloTtftMs" || key == "sloTpotMs") {
        if (!v.is_number() || !(v.get<double>() > 0) || !std::isfinite(v.get<double>())) {
          return where + ": '" + key + "' must be a positive number of milliseconds, got " +
                 v.dump();
        }
        (key == "sloTtftMs" ? obj.slo_ttft_ms : obj.slo_tpot_ms) = v.get<double>();
      } else {
        return where + ": unknown key '" + key +
               "' (expected name, priority, strictPriority, sloTtftMs, sloTpotMs)";
      }
    }
    if (!table.by_name_.emplace(obj.name, obj).second) {
      return where + ": duplicate name";
    }
  }
  return table;
}

ObjectiveTable ObjectiveTable::with_cluster(const std::vector<ClusterObjective>& cluster) const {
  ObjectiveTable out = *this;
  for (const auto& c : cluster) {
    Objective& o = out.by_name_[c.name];
    o.name = c.name;
    if (c.priority) {
      o.priority = *c.priority;
    }
  }
  return out;
}

const Objective* ObjectiveTable::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

}  // namespace llmd::epp
