#pragma once
// Fault injection of a simulated pod (POST /admin/fault), for reliability tests:
//   {"mode":"stall"}  the pod stops answering (requests, /health, /metrics are held and the
//                     engine clock freezes) until the fault ends; held requests then proceed
//   {"mode":"error"}  inference requests and /health answer HTTP 500 (vLLM's error JSON)
//   {"mode":"close"}  inference connections are closed without a response; with
//                     "after_tokens": k, streams are cut after k content chunks instead
//   {"mode":"slow","delay_ms":300}  inference requests reach the engine delay_ms (wall clock)
//                     late: a uniformly slower server (network, overloaded host); metrics and
//                     health answer normally
//   {"mode":"none"}   clears the fault
// "duration_ms" (> 0) ends the fault by itself; absent or 0 = until cleared. Pure values.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>

namespace llmd::modelsim {

enum class FaultMode { kNone, kStall, kError, kClose, kSlow };
std::string_view fault_mode_name(FaultMode mode);

struct FaultSpec {
  FaultMode mode = FaultMode::kNone;
  double duration_ms = 0;    // 0 = until cleared
  int64_t after_tokens = 0;  // close mode: cut streams after this many chunks (0 = at once)
  double delay_ms = 0;       // slow mode: added delay before the engine sees a request
};

// Parses the JSON body of POST /admin/fault; a message naming the bad field on error.
std::variant<FaultSpec, std::string> parse_fault(std::string_view body);

}  // namespace llmd::modelsim
