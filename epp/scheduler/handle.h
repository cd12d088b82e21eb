#pragma once
// What a plugin factory gets: its instance name, its raw JSON parameters and a Handle to the
// process's shared services. Factories run on the thread that loads a configuration; they copy
// what they need out of the Handle (services outlive every pipeline generation built on them).
#include <chrono>
#include <cstdlib>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/interface/plugin.h"

namespace llmd::epp {

class PrefixIndex;       // epp/datastore/prefix_index.h
class PredictionSource;  // epp/interface/prediction_source.h

struct Handle {
  using EnvLookup = std::function<std::optional<std::string>(std::string_view)>;
  using Now = std::function<std::chrono::steady_clock::time_point()>;

  PrefixIndex& prefix_index;
  PredictionSource* prediction_source = nullptr;  // null: predictions disabled (composite mode)
  EnvLookup env;  // null: the process environment; tests inject a map
  Now now;        // null: steady_clock::now; tests and the simulator inject their clock

  std::optional<std::string> getenv(std::string_view key) const {
    if (env) {
      return env(key);
    }
    const char* v = std::getenv(std::string(key).c_str());
    return v == nullptr ? std::nullopt : std::optional<std::string>(v);
  }
  Now clock() const {
    return now ? now : Now([] { return std::chrono::steady_clock::now(); });
  }
};

// A plugin or an error message naming the offending parameter and its value. The loader
// prefixes the plugin's name and type.
struct PluginOrError {
  PluginPtr plugin;
  std::string error;
  static PluginOrError fail(std::string message) { return {nullptr, std::move(message)}; }
};

using PluginFactory = std::function<PluginOrError(
    const std::string& name, const nlohmann::json& params, const Handle& handle)>;

}  // namespace llmd::epp
