#include "common/config/flag_table.h"

#include <cctype>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

namespace llmd::config {

void FlagTable::text(const std::string& name, const std::string& env,
                     const std::string& default_value, const std::string& help,
                     std::function<void(std::string)> set) {
  options_.add(name, env, default_value, help, {}, group_);
  add_read([this, name = key(name), set = std::move(set)] { set(options_.str(name)); });
}

void FlagTable::boolean(const std::string& name, const std::string& env,
                        const std::string& default_value, const std::string& help,
                        std::function<void(bool)> set) {
  options_.add(name, env, default_value, help, {}, group_);
  add_read([this, name = key(name), set = std::move(set)] { set(options_.boolean(name)); });
}

void FlagTable::integer(const std::string& name, const std::string& env,
                        const std::string& default_value, const std::string& help,
                        Range<int64_t> range, std::function<void(int64_t)> set) {
  options_.add(name, env, default_value, help, {}, group_);
  add_read([this, name = key(name), range, set = std::move(set)] {
    set(options_.integer(name, range.min, range.max));
  });
}

void FlagTable::number(const std::string& name, const std::string& env,
                       const std::string& default_value, const std::string& help,
                       Range<double> range, std::function<void(double)> set) {
  options_.add(name, env, default_value, help, {}, group_);
  add_read([this, name = key(name), range, set = std::move(set)] {
    set(options_.number(name, range.min, range.max));
  });
}

void FlagTable::go_boolean(const std::string& name, const std::string& env,
                           const std::string& default_value, const std::string& help,
                           std::function<void(bool)> set) {
  options_.add_flag(name, env, default_value == "true", help, group_);
  add_read([this, name = key(name), set = std::move(set)] { set(options_.boolean(name)); });
}

void FlagTable::duration(const std::string& name, const std::string& env,
                         const std::string& default_value, const std::string& help,
                         Range<std::chrono::milliseconds> range,
                         std::function<void(std::chrono::milliseconds)> set) {
  options_.add(name, env, default_value, help, {}, group_);
  add_read([this, name = key(name), range, set = std::move(set)] {
    const std::string text = options_.str(name);
    auto d = parse_go_duration(text);
    if (!d) {
      throw std::invalid_argument(
          fmt::format("{}: expected a duration such as 50ms, 2s or 1m30s, got '{}'",
                      options_.describe(name), text));
    }
    if ((range.min && *d < *range.min) || (range.max && *d > *range.max)) {
      throw std::invalid_argument(
          fmt::format("{}: {} is out of range [{}, {}]", options_.describe(name), text,
                      range.min ? fmt::format("{}ms", range.min->count()) : "-inf",
                      range.max ? fmt::format("{}ms", range.max->count()) : "inf"));
    }
    set(*d);
  });
}

void FlagTable::alias(const std::string& name, const std::string& target, const std::string& help,
                      bool boolean) {
  options_.add_alias(name, target, help, group_, boolean);
}

std::string FlagTable::key(const std::string& name) {
  return name.size() > 2 && name[1] == ',' ? name.substr(2) : name;
}

std::optional<std::chrono::milliseconds> parse_go_duration(const std::string& text) {
  if (text == "0") {
    return std::chrono::milliseconds(0);
  }
  static const std::pair<const char*, double> kUnits[] = {
      {"ns", 1e-6}, {"us", 1e-3}, {"\u00b5s", 1e-3}, {"\u03bcs", 1e-3},
      {"ms", 1.0},  {"s", 1e3},   {"m", 6e4},        {"h", 3.6e6}};
  std::size_t i = 0;
  bool negative = false;
  if (i < text.size() && (text[i] == '-' || text[i] == '+')) {
    negative = text[i] == '-';
    ++i;
  }
  if (i == text.size()) {
    return std::nullopt;
  }
  double total_ms = 0;
  while (i < text.size()) {
    const std::size_t start = i;
    while (i < text.size() &&
           (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) {
      ++i;
    }
    if (i == start) {
      return std::nullopt;
    }
    double value = 0;
    try {
      std::size_t used = 0;
      value = std::stod(text.substr(start, i - start), &used);
      if (used != i - start) {
        return std::nullopt;
      }
    } catch (const std::exception&) {
      return std::nullopt;
    }
    const std::size_t unit_start = i;
    while (i < text.size() && !std::isdigit(static_cast<unsigned char>(text[i])) &&
           text[i] != '.') {
      ++i;
    }
    const std::string unit = text.substr(unit_start, i - unit_start);
    const double* scale = nullptr;
    for (const auto& [name, ms] : kUnits) {
      if (unit == name) {
        scale = &ms;
      }
    }
    if (scale == nullptr) {
      return std::nullopt;
    }
    total_ms += value * *scale;
  }
  if (negative) {
    return std::nullopt;  // no setting here takes a negative duration
  }
  if (total_ms > 1e15) {
    return std::nullopt;
  }
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(total_ms)));
}

void FlagTable::add_read(std::function<void()> read) {
  if (condition_) {
    read = [condition = condition_, read = std::move(read)] {
      if (condition()) {
        read();
      }
    };
  }
  reads_.push_back(std::move(read));
}

void FlagTable::read() const {
  for (const auto& r : reads_) {
    r();
  }
}

}  // namespace llmd::config
