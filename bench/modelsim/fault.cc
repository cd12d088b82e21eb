#include "bench/modelsim/fault.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace llmd::modelsim {

std::string_view fault_mode_name(FaultMode mode) {
  switch (mode) {
    case FaultMode::kStall:
      return "stall";
    case FaultMode::kError:
      return "error";
    case FaultMode::kClose:
      return "close";
    case FaultMode::kSlow:
      return "slow";
    case FaultMode::kNone:
      break;
  }
  return "none";
}

std::variant<FaultSpec, std::string> parse_fault(std::string_view body) {
  auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.is_object()) {
    return std::string("body must be a JSON object");
  }
  FaultSpec f;
  auto mode = j.find("mode");
  if (mode == j.end() || !mode->is_string()) {
    return std::string("'mode' must be one of stall, error, close, slow, none");
  }
  const auto m = mode->get<std::string>();
  if (m == "stall") {
    f.mode = FaultMode::kStall;
  } else if (m == "error") {
    f.mode = FaultMode::kError;
  } else if (m == "close") {
    f.mode = FaultMode::kClose;
  } else if (m == "slow") {
    f.mode = FaultMode::kSlow;
  } else if (m == "none") {
    f.mode = FaultMode::kNone;
  } else {
    return "'mode' must be one of stall, error, close, slow, none (got '" + m + "')";
  }
  if (auto d = j.find("duration_ms"); d != j.end() && !d->is_null()) {
    if (!d->is_number() || !std::isfinite(d->get<double>()) || d->get<double>() < 0 ||
        d->get<double>() > 86'400'000) {
      return std::string("'duration_ms' must be a number in [0, 86400000]");
    }
    f.duration_ms = d->get<double>();
  }
  if (auto a = j.find("after_tokens"); a != j.end() && !a->is_null()) {
    if (!a->is_number_integer() || a->get<int64_t>() < 0) {
      return std::string("'after_tokens' must be an integer >= 0");
    }
    f.after_tokens = a->get<int64_t>();
  }
  if (auto d = j.find("delay_ms"); d != j.end() && !d->is_null()) {
    if (!d->is_number() || !std::isfinite(d->get<double>()) || d->get<double>() < 0 ||
        d->get<double>() > 600'000) {
      return std::string("'delay_ms' must be a number in [0, 600000]");
    }
    f.delay_ms = d->get<double>();
  }
  if (f.mode == FaultMode::kSlow && f.delay_ms <= 0) {
    return std::string("mode 'slow' needs 'delay_ms' > 0");
  }
  return f;
}

}  // namespace llmd::modelsim
