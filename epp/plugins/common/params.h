#pragma once
// Strict decoding of a plugin's JSON parameters over its defaults: only the keys given are
// overwritten, a key of the wrong type or a key the plugin never asks for is an error naming it.
// Used by factories at load time only.
#include <chrono>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "epp/interface/plugin.h"

namespace llmd::epp {

class ParamReader {
 public:
  explicit ParamReader(const nlohmann::json& params);

  // Each overlays `out` when the key is present; `alias` is an accepted second spelling.
  ParamReader& get(std::string_view key, double& out, std::string_view alias = {});
  ParamReader& get(std::string_view key, int64_t& out, std::string_view alias = {});
  ParamReader& get(std::string_view key, bool& out, std::string_view alias = {});
  ParamReader& get(std::string_view key, std::string& out, std::string_view alias = {});
  // A duration: a Go duration string ("5m", "1h30m", "250ms") or an integer of nanoseconds
  // (what Go's encoding/json reads into a time.Duration).
  ParamReader& get(std::string_view key, std::chrono::nanoseconds& out,
                   std::string_view alias = {});
  // The raw value (a list or a mapping the plugin decodes itself).
  ParamReader& get(std::string_view key, nlohmann::json& out, std::string_view alias = {});
  bool has(std::string_view key) const;

  // First error so far, or unknown keys; empty when the parameters were fine.
  std::string finish() const;

 private:
  const nlohmann::json* find(std::string_view key, std::string_view alias);
  void fail(std::string message);

  const nlohmann::json& params_;
  std::set<std::string, std::less<>> seen_;
  std::string error_;
};

// Go's time.ParseDuration: a sequence of decimal numbers with units ns, us (or µs), ms, s, m,
// h, optionally signed; "0" alone. nullopt when malformed.
std::optional<std::chrono::nanoseconds> parse_go_duration(std::string_view text);

// "parameter 'key' must be <what>, got <value>" for Config::validate().
std::string param_error(std::string_view key, double value, std::string_view what);

// Common type()/name() plumbing for a plugin implementing one extension point.
template <class Interface>
class PluginBase : public Interface {
 public:
  PluginBase(std::string_view type, std::string name) : type_(type), name_(std::move(name)) {}
  std::string_view type() const override { return type_; }
  const std::string& name() const override { return name_; }

 private:
  std::string_view type_;  // points at the plugin's static kType
  std::string name_;
};

}  // namespace llmd::epp
