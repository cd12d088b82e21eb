#pragma once
// Sets (or, with nullopt, unsets) environment variables for one test and restores them after.
// The options tests read the process's environment, as the EPP does.
#include <stdlib.h>

#include <map>
#include <optional>
#include <string>

namespace llmd::epp::test_env {

using EnvVars = std::map<std::string, std::optional<std::string>>;

class ScopedEnv {
 public:
  explicit ScopedEnv(const EnvVars& vars) {
    for (const auto& [name, value] : vars) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      set(name, value);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      set(name, value);
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  static void set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  EnvVars saved_;
};

}  // namespace llmd::epp::test_env
