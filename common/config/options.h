#pragma once
// Command-line flags with environment-variable fallbacks (precedence: flag > env > default).
// Every option documents its env name and default in --help. Values are validated on read;
// a bad one throws std::invalid_argument naming the flag, the env name and the value.
// The command line is read as Go's pflag reads it too, so that a Kubernetes manifest written
// for a Go program runs unchanged: `--name=value` and `--name value`, a boolean flag alone
// (`--flag` means true, `--flag=false`), and a one-letter shorthand as `-v 2`, `-v=2` or
// `--v=2`. An alias is a second name of an option (another program's spelling of it); giving
// both names is an error. An option may have several env names (precedence: flag > env >
// alias envs > default); a set variable that the value in use overrides is checked too, so a
// bad value in a ConfigMap is reported even when a flag wins over it.
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

// true/false, 1/0, yes/no, on/off, t/f (any case); nullopt for anything else.
std::optional<bool> parse_boolean(std::string_view text);

class Options {
 public:
  Options(std::string program, std::string description);
  ~Options();

  // `name` is the long name, or "x,long" with a one-letter shorthand; the option is known by
  // its long name. `env` may be empty (flag only) or several names, "A,B": the first that is
  // set wins; `alias_envs` are read after them (other programs' names of the same setting,
  // e.g. UVICORN_WORKERS). `group` titles a section of --help ("" = the main one).
  void add(const std::string& name, const std::string& env, const std::string& default_value,
           const std::string& help, const std::vector<std::string>& alias_envs = {},
           const std::string& group = "");
  // A boolean that may be given alone (`--name` = true) or as `--name=false`.
  void add_flag(const std::string& name, const std::string& env, bool default_value,
                const std::string& help, const std::string& group = "");
  // `alias` is another name for the option `target` (added before). A `boolean` alias may be
  // given alone (`--alias` = true, as Go's booleans). `--alias` and `--target` together are an
  // error.
  void add_alias(const std::string& alias, const std::string& target, const std::string& help,
                 const std::string& group, bool boolean = false);

  // --version prints `text` and ends the parse as --help does.
  void add_version(std::string text);

  // Returns false when --help or --version was given (printed to stdout).
  // Throws std::invalid_argument on unknown flags or malformed values.
  bool parse(int argc, char** argv);

  std::string str(const std::string& name) const;
  int64_t integer(const std::string& name, std::optional<int64_t> min = std::nullopt,
                  std::optional<int64_t> max = std::nullopt) const;
  double number(const std::string& name, std::optional<double> min = std::nullopt,
                std::optional<double> max = std::nullopt) const;
  bool boolean(const std::string& name) const;
  // True when the option (or an alias of it) was on the command line, or its env was set.
  bool given(const std::string& name) const;
  std::string help() const;
  // "--name / ENV" (as errors name an option): the env the value came from, when it did.
  std::string describe(const std::string& name) const;
  // Every environment name an option reads (envs and alias envs).
  std::set<std::string> env_names() const;

 private:
  struct Entry {
    std::string env;
    std::string default_value;
    bool is_flag = false;
    char shorthand = 0;
    std::vector<std::string> alias_envs;
    std::vector<std::string> envs() const;  // env's names, then alias_envs
  };
  struct Alias {
    std::string target;
  };
  std::vector<std::string> normalize(int argc, char** argv) const;
  // (env, value) of the set variables the value in use overrides.
  const std::vector<std::pair<std::string, std::string>>& shadowed(const std::string& name) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string version_;  // "" = no --version
  std::map<std::string, Entry> entries_;
  std::map<std::string, Alias> aliases_;
  std::map<std::string, std::string> values_;
  std::map<std::string, std::string> given_as_;  // option -> the name or env it came from
  std::map<std::string, std::vector<std::pair<std::string, std::string>>> shadowed_;
};

}  // namespace llmd::config
