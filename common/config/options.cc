#include "common/config/options.h"

#include <cstdlib>
#include <iostream>
#include <stdexcept>

#include <cxxopts.hpp>
#include <fmt/format.h>

namespace llmd::config {

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
                  const std::string& default_value, const std::string& help) {
  std::string text = help;
  if (!env.empty()) {
    text += fmt::format(" (env {})", env);
  }
  impl_->opts.add_options()(name, text, cxxopts::value<std::string>()->default_value(default_value));
  entries_[name] = Entry{env, default_value, false};
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
  entries_[name] = Entry{env, def, true};
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
    if (result.count(name) > 0) {
      values_[name] = result[name].as<std::string>();
    } else if (const char* env = entry.env.empty() ? nullptr : std::getenv(entry.env.c_str());
               env != nullptr && *env != '\0') {
      values_[name] = env;
    } else {
      values_[name] = entry.default_value;
    }
  }
  return true;
}

std::string Options::help() const { return impl_->opts.help(); }

std::string Options::describe(const std::string& name) const {
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

int64_t Options::integer(const std::string& name, std::optional<int64_t> min,
                         std::optional<int64_t> max) const {
  std::string v = str(name);
  std::size_t pos = 0;
  int64_t out = 0;
  try {
    out = std::stoll(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size()) {
    throw std::invalid_argument(fmt::format("{}: expected an integer, got '{}'", describe(name), v));
  }
  if ((min && out < *min) || (max && out > *max)) {
    throw std::invalid_argument(fmt::format("{}: {} is out of range [{}, {}]", describe(name), out,
                                            min ? std::to_string(*min) : "-inf",
                                            max ? std::to_string(*max) : "inf"));
  }
  return out;
}

double Options::number(const std::string& name, std::optional<double> min,
                       std::optional<double> max) const {
  std::string v = str(name);
  std::size_t pos = 0;
  double out = 0;
  try {
    out = std::stod(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  if (pos == 0 || pos != v.size() || out != out) {
    throw std::invalid_argument(fmt::format("{}: expected a number, got '{}'", describe(name), v));
  }
  if ((min && out < *min) || (max && out > *max)) {
    throw std::invalid_argument(fmt::format("{}: {} is out of range [{}, {}]", describe(name), out,
                                            min ? fmt::format("{}", *min) : "-inf",
                                            max ? fmt::format("{}", *max) : "inf"));
  }
  return out;
}

bool Options::boolean(const std::string& name) const {
  std::string v = str(name);
  for (auto& c : v) {
    c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  }
  if (v == "1" || v == "true" || v == "yes" || v == "on") {
    return true;
  }
  if (v == "0" || v == "false" || v == "no" || v == "off") {
    return false;
  }
  throw std::invalid_argument(fmt::format("{}: expected true/false, got '{}'", describe(name), v));
}

}  // namespace llmd::config
