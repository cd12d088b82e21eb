#include "common/config/options.h"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <cxxopts.hpp>
#include <fmt/format.h>

namespace llmd::config {

namespace {

// "x,long" -> {'x', "long"}; "long" -> {0, "long"}.
std::pair<char, std::string> split_name(const std::string& name) {
  if (name.size() > 2 && name[1] == ',') {
    return {name[0], name.substr(2)};
  }
  return {0, name};
}

std::vector<std::string> split_env_names(const std::string& env) {
  std::vector<std::string> out;
  std::stringstream in(env);
  for (std::string part; std::getline(in, part, ',');) {
    if (!part.empty()) {
      out.push_back(part);
    }
  }
  return out;
}

std::string help_text(const std::string& help, const std::string& env) {
  if (env.empty()) {
    return help;
  }
  std::string text = help;
  bool first = true;
  for (const auto& e : split_env_names(env)) {
    text += (first ? " (env " : " (or env ") + e + ")";
    first = false;
  }
  return text;
}

int64_t to_integer(const std::string& what, const std::string& v, std::optional<int64_t> min,
                   std::optional<int64_t> max) {
  std::size_t pos = 0;
  int64_t out = 0;
  try {
    out = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size()) {
    throw std::invalid_argument(fmt::format("{}: expected an integer, got '{}'", what, v));
  }
  if ((min && out < *min) || (max && out > *max)) {
    throw std::invalid_argument(fmt::format("{}: {} is out of range [{}, {}]", what, out,
                                            min ? std::to_string(*min) : "-inf",
                                            max ? std::to_string(*max) : "inf"));
  }
  return out;
}

double to_number(const std::string& what, const std::string& v, std::optional<double> min,
                 std::optional<double> max) {
  std::size_t pos = 0;
  double out = 0;
  try {
    out = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size() || out != out) {
    throw std::invalid_argument(fmt::format("{}: expected a number, got '{}'", what, v));
  }
  if ((min && out < *min) || (max && out > *max)) {
    throw std::invalid_argument(fmt::format("{}: {} is out of range [{}, {}]", what, out,
                                            min ? fmt::format("{}", *min) : "-inf",
                                            max ? fmt::format("{}", *max) : "inf"));
  }
  return out;
}

bool to_boolean(const std::string& what, const std::string& v) {
  if (auto b = parse_boolean(v)) {
    return *b;
  }
  throw std::invalid_argument(fmt::format("{}: expected true/false, got '{}'", what, v));
}

}  // namespace

std::optional<bool> parse_boolean(std::string_view text) {
  std::string v(text);
  for (auto& c : v) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (v == "1" || v == "true" || v == "yes" || v == "on" || v == "t") {
    return true;
  }
  if (v == "0" || v == "false" || v == "no" || v == "off" || v == "f") {
    return false;
  }
  return std::nullopt;
}

std::vector<std::string> Options::Entry::envs() const {
  std::vector<std::string> out = split_env_names(env);
  out.insert(out.end(), alias_envs.begin(), alias_envs.end());
  return out;
}

struct Options::Impl {
  cxxopts::Options opts;
  std::vector<std::string> groups{""};
  Impl(const std::string& program, const std::string& description) : opts(program, description) {}
  void note_group(const std::string& group) {
    if (std::find(groups.begin(), groups.end(), group) == groups.end()) {
      groups.push_back(group);
    }
  }
};

Options::Options(std::string program, std::string description)
    : impl_(std::make_unique<Impl>(program, description)) {
  impl_->opts.add_options()("h,help", "Print this help and exit");
}

Options::~Options() = default;

void Options::add_version(std::string text) {
  version_ = std::move(text);
  impl_->opts.add_options()("version", "Print the version and exit");
}

void Options::add(const std::string& name, const std::string& env, const std::string& default_value,
                  const std::string& help, const std::vector<std::string>& alias_envs,
                  const std::string& group) {
  auto [shorthand, key] = split_name(name);
  impl_->note_group(group);
  std::string text = help_text(help, env);
  for (const auto& alias : alias_envs) {
    text += fmt::format(" (or env {})", alias);
  }
  impl_->opts.add_options(group)(name, text,
                                 cxxopts::value<std::string>()->default_value(default_value));
  entries_[key] = Entry{env, default_value, false, shorthand, alias_envs};
}

void Options::add_flag(const std::string& name, const std::string& env, bool default_value,
                       const std::string& help, const std::string& group) {
  auto [shorthand, key] = split_name(name);
  std::string def = default_value ? "true" : "false";
  impl_->note_group(group);
  impl_->opts.add_options(group)(
      name, help_text(help, env),
      cxxopts::value<std::string>()->default_value(def)->implicit_value("true"));
  entries_[key] = Entry{env, def, true, shorthand, {}};
}

void Options::add_alias(const std::string& alias, const std::string& target,
                        const std::string& help, const std::string& group, bool boolean) {
  auto it = entries_.find(target);
  if (it == entries_.end()) {
    throw std::logic_error("alias of an unknown option: " + target);
  }
  impl_->note_group(group);
  auto value = cxxopts::value<std::string>();
  if (boolean || it->second.is_flag) {
    value->implicit_value("true");
  }
  impl_->opts.add_options(group)(alias, help + " (alias of --" + target + ")", value);
  aliases_[alias] = Alias{target};
}

std::vector<std::string> Options::normalize(int argc, char** argv) const {
  std::vector<std::string> out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    bool done = false;
    for (const auto& [key, entry] : entries_) {
      if (entry.shorthand == 0 || i == 0) {
        continue;
      }
      const std::string s(1, entry.shorthand);
      for (const std::string& form : {"--" + s, "-" + s}) {
        if (a == form) {
          out.push_back("-" + s);
          done = true;
        } else if (a.rfind(form + "=", 0) == 0) {
          out.push_back("-" + s);
          out.push_back(a.substr(form.size() + 1));
          done = true;
        }
        if (done) {
          break;
        }
      }
      if (done) {
        break;
      }
    }
    if (!done) {
      out.push_back(std::move(a));
    }
  }
  return out;
}

bool Options::parse(int argc, char** argv) {
  std::vector<std::string> args = normalize(argc, argv);
  std::vector<char*> ptrs;
  for (auto& a : args) {
    ptrs.push_back(a.data());
  }
  cxxopts::ParseResult result;
  try {
    result = impl_->opts.parse(static_cast<int>(ptrs.size()), ptrs.data());
  } catch (const cxxopts::exceptions::exception& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see --help)");
  }
  if (result.count("help") > 0) {
    std::cout << help() << std::endl;
    return false;
  }
  if (!version_.empty() && result.count("version") > 0) {
    std::cout << version_ << std::endl;
    return false;
  }
  if (!result.unmatched().empty()) {
    throw std::invalid_argument("unexpected argument '" + result.unmatched().front() +
                                "' (see --help)");
  }
  std::map<std::string, std::string> from_alias;  // target -> alias given
  for (const auto& [alias, a] : aliases_) {
    if (result.count(alias) == 0) {
      continue;
    }
    if (result.count(a.target) > 0) {
      throw std::invalid_argument(
          fmt::format("--{} and --{} name the same setting: give one", alias, a.target));
    }
    if (auto seen = from_alias.find(a.target); seen != from_alias.end()) {
      throw std::invalid_argument(
          fmt::format("--{} and --{} name the same setting: give one", seen->second, alias));
    }
    from_alias[a.target] = alias;
    values_[a.target] = result[alias].as<std::string>();
    given_as_[a.target] = "--" + alias;
  }
  for (const auto& [name, entry] : entries_) {
    bool from_flag = from_alias.count(name) > 0;
    if (!from_flag) {
      values_[name] = entry.default_value;
      if (result.count(name) > 0) {
        values_[name] = result[name].as<std::string>();
        given_as_[name] = "--" + name;
        from_flag = true;
      }
    }
    bool from_env = false;
    for (const auto& env : entry.envs()) {
      const char* v = std::getenv(env.c_str());
      if (v == nullptr || *v == '\0') {
        continue;
      }
      if (from_flag || from_env) {
        shadowed_[name].emplace_back(env, v);
      } else {
        values_[name] = v;
        given_as_[name] = env;
        from_env = true;
      }
    }
  }
  return true;
}

std::string Options::help() const {
  return impl_->opts.help(impl_->groups);
}

std::string Options::describe(const std::string& name) const {
  if (auto g = given_as_.find(name); g != given_as_.end()) {
    if (g->second.rfind("--", 0) == 0 && g->second != "--" + name) {
      return g->second;  // an alias: the name the user wrote
    }
    if (g->second.rfind("--", 0) != 0) {
      return fmt::format("--{} / {}", name, g->second);  // the env the value came from
    }
  }
  auto it = entries_.find(name);
  if (it != entries_.end() && !it->second.env.empty()) {
    std::string envs;
    for (const auto& e : split_env_names(it->second.env)) {
      envs += (envs.empty() ? "" : " / ") + e;
    }
    return fmt::format("--{} / {}", name, envs);
  }
  return "--" + name;
}

std::set<std::string> Options::env_names() const {
  std::set<std::string> out;
  for (const auto& [name, entry] : entries_) {
    for (const auto& e : entry.envs()) {
      out.insert(e);
    }
  }
  return out;
}

bool Options::given(const std::string& name) const {
  return given_as_.count(name) > 0;
}

std::string Options::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw std::logic_error("option not registered or not parsed: " + name);
  }
  return it->second;
}

// Each typed read checks the value in use, then every set variable it overrides.
int64_t Options::integer(const std::string& name, std::optional<int64_t> min,
                         std::optional<int64_t> max) const {
  const int64_t out = to_integer(describe(name), str(name), min, max);
  for (const auto& [env, v] : shadowed(name)) {
    to_integer(fmt::format("--{} / {}", name, env), v, min, max);
  }
  return out;
}

double Options::number(const std::string& name, std::optional<double> min,
                       std::optional<double> max) const {
  const double out = to_number(describe(name), str(name), min, max);
  for (const auto& [env, v] : shadowed(name)) {
    to_number(fmt::format("--{} / {}", name, env), v, min, max);
  }
  return out;
}

bool Options::boolean(const std::string& name) const {
  const bool out = to_boolean(describe(name), str(name));
  for (const auto& [env, v] : shadowed(name)) {
    to_boolean(fmt::format("--{} / {}", name, env), v);
  }
  return out;
}

const std::vector<std::pair<std::string, std::string>>& Options::shadowed(
    const std::string& name) const {
  static const std::vector<std::pair<std::string, std::string>> kNone;
  auto it = shadowed_.find(name);
  return it == shadowed_.end() ? kNone : it->second;
}

}  // namespace llmd::config
