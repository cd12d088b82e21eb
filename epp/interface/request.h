#pragma once
// The scheduling view of one inference request, built once by the proxy from the HTTP request
// (body + headers) and read-only for plugins.
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace llmd::epp {

struct SchedulingRequest {
  std::string request_id;  // x-request-id (generated when absent)
  std::string model;       // body.model
  // The model the pod will be asked for: `model`, or a model-level routing rule's override
  // (set once the request is routed; "" before, and for a request that was never routed).
  std::string target_model;
  std::string prompt_text;   // completion prompt, or chat messages' text each followed by a space
  int64_t input_tokens = 0;  // whitespace-separated words of prompt_text
  // Bytes of the body the pod gets: the client's as read, or the rewritten one once a routing
  // rule's override_params changed it (0: no HTTP body, e.g. the simulator).
  int64_t body_bytes = 0;
  bool streaming = false;
  // x-llm-d-slo-ttft-ms / x-llm-d-slo-tpot-ms or their old names x-slo-ttft-ms / x-slo-tpot-ms
  // (epp/request/inbound_headers.h), else the objective's defaults.
  std::optional<double> slo_ttft_ms;
  std::optional<double> slo_tpot_ms;
  // Soft priority, higher = more important (Dynamo's polarity; vLLM's is the opposite and the
  // proxy converts when forwarding). From header, nvext.agent_hints, or the objective.
  int64_t priority = 0;
  int64_t strict_priority = 0;     // router queue tier, higher first; never forwarded
  bool prediction_enabled = true;  // x-prediction-based-scheduling (absent = configured default)
  std::string objective;           // x-llm-d-inference-objective (or x-gateway-inference-objective)
  std::string subject;             // x-subject (model-level routing rules)
  std::map<std::string, std::string> metadata;  // x-metadata, a JSON object of strings
  // x-llmd-debug (honoured only when the EPP runs with --allow-debug-header): the scheduler
  // fills a DecisionExplanation for this request and the proxy returns it in x-llmd-decision.
  bool explain = false;
  // Set only on the prompt a finished response hands back to the producers: how many
  // characters of prompt_text the pod counted how many tokens for (the request's own prompt and
  // its usage.prompt_tokens). nullopt = unknown (no usage in the response).
  struct MeasuredText {
    int64_t chars = 0;
    int64_t tokens = 0;
  };
  std::optional<MeasuredText> measured_text;
  bool sheddable() const { return priority < 0; }
  bool has_slo() const { return slo_ttft_ms.has_value() || slo_tpot_ms.has_value(); }
};

}  // namespace llmd::epp
