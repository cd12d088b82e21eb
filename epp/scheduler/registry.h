#pragma once
// Plugin type name -> factory. Built once at start-up (register_builtin_plugins plus anything a
// test or an embedder adds), then only read by the loader; not a global: whoever loads
// configurations owns one and passes it by reference.
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "epp/scheduler/handle.h"

namespace llmd::epp {

class PluginRegistry {
 public:
  // Throws std::logic_error on a duplicate type (a programming error at start-up).
  void add(std::string_view type, PluginFactory factory);
  // A renamed type keeps working under its old name; the plugin reports its current type.
  void add_alias(std::string_view alias, std::string_view type);

  // Null when unknown.
  const PluginFactory* find(std::string_view type) const;
  std::vector<std::string> types() const;  // sorted, aliases included

 private:
  std::map<std::string, PluginFactory, std::less<>> factories_;
};

}  // namespace llmd::epp
