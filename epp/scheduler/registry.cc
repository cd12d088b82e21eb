#include "epp/scheduler/registry.h"

#include <stdexcept>

namespace llmd::epp {

void PluginRegistry::add(std::string_view type, PluginFactory factory) {
  if (!factories_.emplace(std::string(type), std::move(factory)).second) {
    throw std::logic_error("plugin type registered twice: " + std::string(type));
  }
}

void PluginRegistry::add_alias(std::string_view alias, std::string_view type) {
  const PluginFactory* f = find(type);
  if (f == nullptr) {
    throw std::logic_error("alias " + std::string(alias) + " for unknown type " +
                           std::string(type));
  }
  add(alias, *f);
}

const PluginFactory* PluginRegistry::find(std::string_view type) const {
  auto it = factories_.find(type);
  return it == factories_.end() ? nullptr : &it->second;
}

std::vector<std::string> PluginRegistry::types() const {
  std::vector<std::string> out;
  for (const auto& [type, f] : factories_) {
    out.push_back(type);
  }
  return out;
}

}  // namespace llmd::epp
