#include "common/config/flag_table.h"

namespace llmd::config {

void FlagTable::text(const std::string& name, const std::string& env,
                     const std::string& default_value, const std::string& help,
                     std::function<void(std::string)> set) {
  options_.add(name, env, default_value, help);
  add_read([this, name, set = std::move(set)] { set(options_.str(name)); });
}

void FlagTable::boolean(const std::string& name, const std::string& env,
                        const std::string& default_value, const std::string& help,
                        std::function<void(bool)> set) {
  options_.add(name, env, default_value, help);
  add_read([this, name, set = std::move(set)] { set(options_.boolean(name)); });
}

void FlagTable::integer(const std::string& name, const std::string& env,
                        const std::string& default_value, const std::string& help,
                        Range<int64_t> range, std::function<void(int64_t)> set) {
  options_.add(name, env, default_value, help);
  add_read([this, name, range, set = std::move(set)] {
    set(options_.integer(name, range.min, range.max));
  });
}

void FlagTable::number(const std::string& name, const std::string& env,
                       const std::string& default_value, const std::string& help,
                       Range<double> range, std::function<void(double)> set) {
  options_.add(name, env, default_value, help);
  add_read([this, name, range, set = std::move(set)] {
    set(options_.number(name, range.min, range.max));
  });
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
