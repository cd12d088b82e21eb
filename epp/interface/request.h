#pragma once
// The scheduling view of one inference request, built once by the proxy from the HTTP request
// (body + headers) and read-only for plugins.
#include <cstdint>
#include <optional>
#include <string>

namespace llmd::epp {

struct SchedulingRequest {
  std::string request_id;   // x-request-id (generated when absent)
  std::string model;        // body.model
  std::string prompt_text;  // completion prompt, or chat messages' text each followed by a space
  int64_t input_tokens = 0; // whitespace-separated words of prompt_text
  bool streaming = false;
  std::optional<double> slo_ttft_ms;  // x-slo-ttft-ms
  std::optional<double> slo_tpot_ms;  // x-slo-tpot-ms
  int64_t priority = 0;               // soft priority (objective or nvext.agent_hints.priority)
  int64_t strict_priority = 0;        // tier (nvext.agent_hints.strict_priority)
  bool prediction_enabled = true;     // x-prediction-based-scheduling (absent = configured default)
  std::string objective;              // x-gateway-inference-objective
  bool sheddable() const { return priority < 0; }
  bool has_slo() const { return slo_ttft_ms.has_value() || slo_tpot_ms.has_value(); }
};

}  // namespace llmd::epp
