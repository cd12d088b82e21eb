#pragma once
// The EPP options tests' tools: an environment set for one test and restored after (the
// options read the process's environment, as the EPP does), and the command line parsed.
#include <stdlib.h>

#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "epp/app/epp_options.h"

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

// parse_epp_options on "epp" + `args`; nullopt for --help / --version.
inline std::optional<EppOptions> parse_args(std::vector<std::string> args) {
  args.insert(args.begin(), "epp");
  std::vector<char*> argv;
  for (auto& a : args) {
    argv.push_back(a.data());
  }
  return parse_epp_options(static_cast<int>(argv.size()), argv.data());
}

// The message a bad command line is refused with, or "(no error)".
inline std::string error_of(std::vector<std::string> args) {
  try {
    parse_args(std::move(args));
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace llmd::epp::test_env
