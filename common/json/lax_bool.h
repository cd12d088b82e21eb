#pragma once
// A boolean field as vLLM's request models read it: pydantic's lax mode (vLLM does not ask for
// strict booleans), so clients that send "stream": "true" -- the Gateway API Inference
// Extension's own latency guide does -- are served by the pod, and must not be refused by us.
//
// Accepted: true / false; the integers 0 and 1; the floats 0.0 and 1.0 (-0.0 too); and the
// strings "0", "1" and, in any letter case, "f", "n", "no", "off", "false", "t", "y", "on",
// "yes", "true" (no surrounding spaces). Anything else (null included: the caller decides
// what a missing value means) is nullopt.
#include <optional>

#include <nlohmann/json_fwd.hpp>

namespace llmd::json {

std::optional<bool> lax_bool(const nlohmann::json& value);

}  // namespace llmd::json
