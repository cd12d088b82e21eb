#pragma once
// Command-line flags with environment-variable fallbacks (precedence: flag > env > default).
// Every option documents its env name and default in --help. Values are validated on read;
// a bad value throws std::invalid_argument naming the flag, the env name and the value.
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llmd::config {

class Options {
 public:
  Options(std::string program, std::string description);
  ~Options();

  // `env` may be empty (flag only).
  void add(const std::string& name, const std::string& env, const std::string& default_value,
           const std::string& help);
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

 private:
  struct Entry {
    std::string env;
    std::string default_value;
    bool is_flag = false;
  };
  std::string describe(const std::string& name) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> values_;
};

}  // namespace llmd::config
