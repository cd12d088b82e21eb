#pragma once
// A table of flags bound to typed fields. Each row names the flag, its env fallback, default,
// help and range, and says where the value goes, so a program lists each flag exactly once
// (with Options alone every flag is added in one list and read back by name in a second).
// read() fills every field in table order and throws std::invalid_argument naming the flag,
// its env and the bad value (Options' messages).
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "common/config/options.h"

namespace llmd::config {

template <class T>
struct Range {
  std::optional<T> min;
  std::optional<T> max;
};

class FlagTable {
 public:
  explicit FlagTable(Options& options) : options_(options) {}

  void text(const std::string& name, const std::string& env, const std::string& default_value,
            const std::string& help, std::function<void(std::string)> set);
  void boolean(const std::string& name, const std::string& env, const std::string& default_value,
               const std::string& help, std::function<void(bool)> set);
  void integer(const std::string& name, const std::string& env, const std::string& default_value,
               const std::string& help, Range<int64_t> range, std::function<void(int64_t)> set);
  void number(const std::string& name, const std::string& env, const std::string& default_value,
              const std::string& help, Range<double> range, std::function<void(double)> set);
  // A boolean as Go's flag package has them: alone means true (`--name`, `--name=false`).
  void go_boolean(const std::string& name, const std::string& env, const std::string& default_value,
                  const std::string& help, std::function<void(bool)> set);
  // A duration in Go's syntax ("50ms", "2s", "1m30s", "1h"; "0" alone), into milliseconds
  // (sub-millisecond parts are rounded up, so a positive duration stays positive).
  void duration(const std::string& name, const std::string& env, const std::string& default_value,
                const std::string& help, Range<std::chrono::milliseconds> range,
                std::function<void(std::chrono::milliseconds)> set);
  // Another name for the row `target` (another program's spelling); see Options::add_alias.
  void alias(const std::string& name, const std::string& target, const std::string& help,
             bool boolean = false);

  // Rows added from here on are listed under `title` in --help ("" = the main section).
  void section(std::string title) { group_ = std::move(title); }
  // After read(): whether the row's flag (or an alias) or env was set.
  bool given(const std::string& name) const { return options_.given(name); }

  // Rows added from here on are read (and so checked) only when `condition` holds at read time;
  // it may look at fields that rows earlier in the table filled. always() ends the group.
  void when(std::function<bool()> condition) { condition_ = std::move(condition); }
  void always() { condition_ = nullptr; }

  // After Options::parse: hands every row's value to its setter, in table order.
  void read() const;

 private:
  void add_read(std::function<void()> read);
  static std::string key(const std::string& name);  // "x,long" -> "long"

  Options& options_;
  std::string group_;
  std::function<bool()> condition_;
  std::vector<std::function<void()>> reads_;
};

// Go's time.ParseDuration, in milliseconds; nullopt when `text` is not a duration.
std::optional<std::chrono::milliseconds> parse_go_duration(const std::string& text);

// Setters for the common field types.
inline std::function<void(std::string)> into(std::string& field) {
  return [&field](std::string v) { field = std::move(v); };
}
inline std::function<void(bool)> into(bool& field) {
  return [&field](bool v) { field = v; };
}
inline std::function<void(double)> into(double& field) {
  return [&field](double v) { field = v; };
}
// An integer field of another width (a port, a size, a count); the row's range keeps it in.
template <class T>
std::function<void(int64_t)> cast_into(T& field) {
  return [&field](int64_t v) { field = static_cast<T>(v); };
}
// A whole number of the duration's own unit (e.g. a -ms flag into milliseconds).
template <class Duration>
std::function<void(int64_t)> count_into(Duration& field) {
  return [&field](int64_t v) { field = Duration(v); };
}
// Seconds, fractions allowed, kept as whole milliseconds (truncated).
inline std::function<void(double)> seconds_into(std::chrono::milliseconds& field) {
  return [&field](double v) { field = std::chrono::milliseconds(static_cast<int64_t>(v * 1000)); };
}

}  // namespace llmd::config
