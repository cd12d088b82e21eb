#pragma once
// The one feature row of a (request, candidate pod) decision. The predicted-latency producer
// builds it to ask for a prediction and the training feedback builds it again, from the same
// Endpoint copy the scheduler picked, for the sample of that decision: one function, so what
// the model is trained on is exactly what it is asked about (same clamps, same in-flight view).
#include <cstdint>

#include "common/features/schema.h"
#include "epp/interface/endpoint.h"
#include "epp/interface/request.h"

namespace llmd::epp {

// Row for the first token's latency (num_tokens_generated = 1). For the TPOT sample of a
// finished stream the caller sets num_tokens_generated to the tokens it produced.
features::FeatureInput feature_row(const SchedulingRequest& request, const Endpoint& pod);

// Prompt tokens the pod still has to prefill for this request: input tokens minus the share the
// EPP's prefix index believes the pod holds. This is what the request adds to the pod's
// prefill_tokens_in_flight while it waits for its first token (cached tokens cost no prefill).
int64_t uncached_prompt_tokens(const SchedulingRequest& request, const Endpoint& pod);

}  // namespace llmd::epp
