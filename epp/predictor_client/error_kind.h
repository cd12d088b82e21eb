#pragma once
// Why a caller got no predictions. One label value of llmd_epp_predictor_errors_total{kind} each.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace llmd::epp::predictor_client {

enum class ErrorKind : uint8_t {
  kTimeout,        // a dispatch got no answer within its timeout
  kHttp,           // the replica answered with a non-200 status
  kTransport,      // connect/write/read failed (refused, reset, DNS)
  kShortResponse,  // 200, but not exactly one prediction per row
  kBadResponse,    // 200, but the body is not the shape of its path (columnar or strict)
  kNoReplica,      // no healthy replica to send to (all down, waiting for /readyz)
  kDeadline,       // a caller's wait reached its deadline; a later answer is discarded
  kShed,           // overload: the rows ahead could not be answered before the caller's deadline,
                   // or the cap on calls in flight (CallLimiter) is full
};
inline constexpr std::size_t kErrorKindCount = 8;

inline constexpr std::array<std::string_view, kErrorKindCount> kErrorKindNames = {
    "timeout",      "http",       "transport", "short_response",
    "bad_response", "no_replica", "deadline",  "shed"};

inline std::string_view error_kind_name(ErrorKind k) {
  return kErrorKindNames[static_cast<std::size_t>(k)];
}

}  // namespace llmd::epp::predictor_client
