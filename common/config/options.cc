#include "common/config/options.h"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include <cxxopts.hpp>
#include <fmt/format.h>

namespace llmd::config {

std::optional<bool> parse_boolean(std::string_view text) {
  std::string v(text);
  for (auto& c : v) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    return true;
  }
  if (v == "0" || v == "false" || v == "no" || v == "off") {
    return false;
  }
  return std::nullopt;
}

struct Options::Impl {
  cxxopts::Options opts;
  Impl(const std::string& program, const std::string& description) : opts(program, description) {}
};

Options::Options(std::string program, std::string description)
    : impl_(std::make_unique<Impl>(program, description)) {
  impl_->opts.add_options()("h,help", "Print this help and exit");
}

Options::~Options() = default;

void Options::add(const std::string& name, const std::string& env,
                  const std::string& default_value, const std::string& help,
                  const std::vector<std::string>& alias_envs) {
  std::string text = help;
  if (!env.empty()) {
    text += fmt::format(" (env {})", env);
  }
  for (const auto& alias : alias_envs) {
    text += fmt::format(" (or env {})", alias);
  }
  impl_->opts.add_options()(name, text, cxxopts::value<std::string>()->default_value(default_value));
  entries_[name] = Entry{env, default_value, false, alias_envs};
}

void Options::add_flag(const std::string& name, const std::string& env, bool default_value,
                       const std::string& help) {
  std::string text = help;
  if (!env.empty()) {
    text += fmt::format(" (env {})", env);
  }
  std::string def = default_value ? "true" : "false";
  impl_->opts.add_options()(name, text,
                            cxxopts::value<std::string>()->default_value(def)->implicit_value("true"));
  entries_[name] = Entry{env, def, true, {}};
}

bool Options::parse(int argc, char** argv) {
  cxxopts::ParseResult result;
  try {
    result = impl_->opts.parse(argc, argv);
  } catch (const cxxopts::exceptions::exception& e) {
    throw std::invalid_argument(std::string(e.what()) + " (see --help)");
  }
  if (result.count("help") > 0) {
    std::cout << help() << std::endl;
    return false;
  }
  if (!result.unmatched().empty()) {
    throw std::invalid_argument("unexpected argument '" + result.unmatched().front() +
                                "' (see --help)");
  }
  for (const auto& [name, entry] : entries_) {
    values_[name] = entry.default_value;
    const bool from_flag = result.count(name) > 0;
    if (from_flag) {
      values_[name] = result[name].as<std::string>();
    }
    std::vector<std::string> envs = entry.alias_envs;
    if (!entry.env.empty()) {
      envs.insert(envs.begin(), entry.env);
    }
    for (const auto& env : envs) {
      const char* v = std::getenv(env.c_str());
      if (v == nullptr || *v == '\0') {
        continue;
      }
      if (from_flag || value_env_.count(name) > 0) {
        shadowed_[name].emplace_back(env, v);
      } else {
        values_[name] = v;
        value_env_[name] = env;
      }
    }
  }
  return true;
}

std::string Options::help() const { return impl_->opts.help(); }

std::set<std::string> Options::env_names() const {
  std::set<std::string> out;
  for (const auto& [name, entry] : entries_) {
    if (!entry.env.empty()) {
      out.insert(entry.env);
    }
    out.insert(entry.alias_envs.begin(), entry.alias_envs.end());
  }
  return out;
}

std::string Options::describe(const std::string& name) const {
  if (auto from = value_env_.find(name); from != value_env_.end()) {
    return fmt::format("--{} / {}", name, from->second);
  }
  auto it = entries_.find(name);
  if (it != entries_.end() && !it->second.env.empty()) {
    return fmt::format("--{} / {}", name, it->second.env);
  }
  return "--" + name;
}

std::string Options::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end()) {
    throw std::logic_error("option not registered or not parsed: " + name);
  }
  return it->second;
}

namespace {

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

// Each typed read checks the value in use, then every set variable it overrides: a bad value in
// a ConfigMap is reported even when a flag wins over it.
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
