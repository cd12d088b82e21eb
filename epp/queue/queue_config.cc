#include "epp/queue/queue_config.h"

#include <cmath>
#include <cstdint>
#include <optional>

namespace llmd::epp {
namespace {

using nlohmann::json;

std::string got(const json& v) {
  if (!v.is_string()) {
    return v.dump();
  }
  std::string s = "'";  // appended, not "'" + str: GCC 12 warns falsely (-Wrestrict) on that
  s += v.get_ref<const std::string&>();
  s += '\'';
  return s;
}

// 200.0 is accepted as 200, as in plugin parameters.
std::optional<int64_t> as_int(const json& v) {
  if (v.is_number_unsigned()) {
    return v.get<uint64_t>() <= INT64_MAX ? std::optional<int64_t>(v.get<int64_t>()) : std::nullopt;
  }
  if (v.is_number_integer()) {
    return v.get<int64_t>();
  }
  if (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>() &&
      std::fabs(v.get<double>()) < 9.0e15) {
    return static_cast<int64_t>(v.get<double>());
  }
  return std::nullopt;
}

std::string read_int(const json& v, const std::string& at, int64_t& out) {
  if (auto n = as_int(v); n && *n > 0) {
    out = *n;
    return {};
  }
  return at + ": expected a positive integer, got " + got(v);
}

// Capped so that arrival + duration cannot overflow the clock.
std::string read_ms(const json& v, const std::string& at, int64_t min,
                    std::chrono::milliseconds& out) {
  constexpr int64_t kYearMs = 365LL * 24 * 3600 * 1000;
  if (auto n = as_int(v); n && *n >= min && *n <= kYearMs) {
    out = std::chrono::milliseconds(*n);
    return {};
  }
  return at + ": expected a whole number of milliseconds in [" + std::to_string(min) + ", " +
         std::to_string(kYearMs) + "], got " + got(v);
}

std::string read_positive(const json& v, const std::string& at, double max, double& out) {
  if (v.is_number() && std::isfinite(v.get<double>()) && v.get<double>() > 0 &&
      v.get<double>() <= max) {
    out = v.get<double>();
    return {};
  }
  return at + ": expected " +
         (std::isinf(max) ? std::string("a positive number") : "a number in (0, 1]") + ", got " +
         got(v);
}

std::string read_threshold(const json& v, const std::string& at, SaturationThresholds& t) {
  constexpr double kInf = INFINITY;
  t = SaturationThresholds{};
  if (v.is_number()) {
    t.prefill_fraction.emplace();
    return read_positive(v, at, kInf, *t.prefill_fraction);
  }
  if (!v.is_object()) {
    return at + ": expected a number (prefill fraction) or a map of limits, got " + got(v);
  }
  for (const auto& [k, x] : v.items()) {
    std::string err, here = at + "." + k;
    int64_t n = 0;
    double d = 0;
    if (k == "prefillFraction") {
      err = read_positive(x, here, kInf, d);
      t.prefill_fraction = d;
    } else if (k == "maxBatchedTokens") {
      err = read_int(x, here, t.max_batched_tokens);
    } else if (k == "inFlightRequests") {
      err = read_int(x, here, n);
      t.in_flight_requests = n;
    } else if (k == "waitingRequests") {
      err = read_int(x, here, n);
      t.waiting_requests = n;
    } else if (k == "kvCacheUsage") {
      err = read_positive(x, here, 1.0, d);
      t.kv_cache_usage = d;
    } else if (k == "predictedTtftMs") {
      err = read_positive(x, here, kInf, d);
      t.predicted_ttft_ms = d;
    } else {
      err = at + ": unknown key '" + k + "'";
    }
    if (!err.empty()) {
      return err;
    }
  }
  if (!t.any()) {
    return at +
           ": set at least one limit (prefillFraction, inFlightRequests, waitingRequests, "
           "kvCacheUsage or predictedTtftMs)";
  }
  if (v.contains("maxBatchedTokens") && !t.prefill_fraction) {
    return at + ": maxBatchedTokens only applies with prefillFraction";
  }
  return {};
}

}  // namespace

std::variant<RouterQueueConfig, std::string> parse_router_queue_config(const json& section) {
  RouterQueueConfig c;
  if (section.is_null()) {
    return c;
  }
  if (!section.is_object()) {
    return "routerQueue: expected a map, got " + got(section);
  }
  for (const auto& [k, v] : section.items()) {
    std::string err, at = "routerQueue." + k;
    if (k == "policy") {
      auto p = v.is_string() ? parse_queue_policy(v.get<std::string>()) : std::nullopt;
      if (p) {
        c.queue.policy = *p;
      } else {
        err = at + ": expected fcfs, lcfs, wspt or slo-deadline, got " + got(v);
      }
    } else if (k == "routerQueueThreshold") {
      err = read_threshold(v, at, c.saturation);
    } else if (k == "maxSize") {
      int64_t n = 0;
      err = read_int(v, at, n);
      c.queue.max_size = static_cast<std::size_t>(n);
    } else if (k == "timeoutMs") {
      err = read_ms(v, at, 1, c.queue.timeout);
    } else if (k == "priorityBumpMs") {
      err = read_ms(v, at, 0, c.queue.priority_bump);
    } else if (k == "defaultDeadlineMs") {
      c.queue.default_deadline.emplace();
      err = read_ms(v, at, 1, *c.queue.default_deadline);
    } else {
      err = "routerQueue: unknown key '" + k + "'";
    }
    if (!err.empty()) {
      return err;
    }
  }
  return c;
}

}  // namespace llmd::epp
