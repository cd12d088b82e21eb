#pragma once
// Command-line flags with environment-variable fallbacks (precedence: flag > env > alias envs >
// default). Every option documents its env names and default in --help. Values are validated on
// read, together with every set variable the value in use overrides; a bad value throws
// std::invalid_argument naming the flag, the env name it came from and the value.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmd::config {

// true/false, 1/0, yes/no, on/off (any case); nullopt for anything else.
std::optional<bool> parse_boolean(std::string_view text);

class Options {
 public:
  Options(std::string program, std::string description);
  ~Options();

  // `env` may be empty (flag only). `alias_envs` are other names of the same setting, read in
  // order when `env` is unset (e.g. UVICORN_WORKERS, which the reference images use).
  void add(const std::string& name, const std::string& env, const std::string& default_value,
           const std::string& help, const std::vector<std::string>& alias_envs = {});
  void add_flag(const std::string& name, const std::string& env, bool default_value,
                const std::string& help);

  // Returns false when --help was given (help already printed to stdout).
  // Throws std::invalid_argument on unknown flags or malformed values.
  bool parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name, std::optional<int64_t> min = std::nullopt,
                  std::optional<int64_t> max = std::nullopt) const;
  double number(const std::string& name, std::optional<double> min = std::nullopt,
                std::optional<double> max = std::nullopt) const;
  bool boolean(const std::string& name) const;
  std::string help() const;
  // Every environment name an option reads (envs and alias envs).
  std::set<std::string> env_names() const;

 private:
  struct Entry {
    std::string env;
    std::string default_value;
    bool is_flag = false;
    std::vector<std::string> alias_envs;
  };
  std::string describe(const std::string& name) const;
  // (env, value) of the set variables the value in use overrides.
  const std::vector<std::pair<std::string, std::string>>& shadowed(const std::string& name) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> value_env_;  // option -> env its value came from
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> shadowed_;
};

}  // namespace llmd::config
