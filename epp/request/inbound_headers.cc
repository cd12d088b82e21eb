#include "epp/request/inbound_headers.h"

#include <random>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

namespace llmd::epp {
namespace {

// The value under `current`, else under `old` (llm-d-router's order); `used` names the header
// the value came from. Both present with different values: logged at debug, `current` wins.
std::optional<std::string> aliased(const HeaderLookup& lookup, const char* current, const char* old,
                                   const std::string& request_id, std::string* used = nullptr) {
  std::optional<std::string> now = lookup(current);
  std::optional<std::string> before = lookup(old);
  if (now && before && *now != *before) {
    spdlog::debug("request {}: header {} '{}' wins over {} '{}'", request_id, current, *now, old,
                  *before);
  }
  if (used != nullptr) {
    *used = now || !before ? current : old;
  }
  return now ? now : before;
}

}  // namespace

std::string new_request_id() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  return fmt::format("{:016x}{:016x}", rng(), rng());
}

InboundHeaders read_inbound_headers(const HeaderLookup& lookup) {
  InboundHeaders h;
  h.request_id = lookup("x-request-id").value_or(new_request_id());
  h.slo_ttft_ms =
      aliased(lookup, kTtftSloHeader, kOldTtftSloHeader, h.request_id, &h.slo_ttft_header);
  h.slo_tpot_ms =
      aliased(lookup, kTpotSloHeader, kOldTpotSloHeader, h.request_id, &h.slo_tpot_header);
  h.objective = aliased(lookup, kObjectiveHeader, kOldObjectiveHeader, h.request_id).value_or("");
  h.prediction_based_scheduling = lookup("x-prediction-based-scheduling");
  h.subject = lookup("x-subject");
  h.metadata = lookup("x-metadata");
  h.priority = lookup("x-dynamo-request-priority");
  h.strict_priority = lookup("x-dynamo-request-strict-priority");
  h.debug = lookup("x-llmd-debug");
  return h;
}

}  // namespace llmd::epp
