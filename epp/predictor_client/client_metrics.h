#pragma once
// The predictor client's own metrics (epp.md section 3). Every child is created here, once, at
// construction; the dispatch path only touches the stored pointers (no lookups by string).
// prometheus-cpp metrics are thread-safe; this struct is immutable after construction.
// Included only by predictor_client.cc and tests (keeps prometheus headers out of users).
#include <array>
#include <string>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>
#include <prometheus/registry.h>

#include "epp/predictor_client/error_kind.h"

namespace llmd::epp::predictor_client {

struct ClientMetrics {
  // `replicas` are the label values of {replica} (the configured URLs), in replica order.
  ClientMetrics(prometheus::Registry& registry, const std::vector<std::string>& replicas);

  void error(ErrorKind kind) const { errors[static_cast<std::size_t>(kind)]->Increment(); }

  prometheus::Histogram* batch_rows = nullptr;           // llmd_epp_predictor_batch_rows
  prometheus::Histogram* batch_callers = nullptr;        // llmd_epp_predictor_batch_callers
  std::vector<prometheus::Histogram*> dispatch_seconds;  // {replica}
  // llmd_epp_predictor_wait_seconds: one caller's submit -> its predictions (coalescing window,
  // the wait for a call slot, the round trip and its retries), answered callers only.
  prometheus::Histogram* wait_seconds = nullptr;
  std::vector<prometheus::Gauge*> replica_healthy;  // {replica}, 1 or 0
  // {replica}: 1 while batches to the replica use the columnar path, 0 while it gets
  // /predict/bulk/strict after a 404/405 there (a reference predictor); back to 1 when a retry
  // or its re-admission finds the columnar path served (ColumnarPaths).
  std::vector<prometheus::Gauge*> replica_columnar;
  prometheus::Counter* bytes_sent = nullptr;  // llmd_epp_predictor_body_bytes_total{direction}
  prometheus::Counter* bytes_received = nullptr;
  std::array<prometheus::Counter*, kErrorKindCount> errors{};  // {kind}
  prometheus::Gauge* call_limit = nullptr;                     // llmd_epp_predictor_call_limit
};

}  // namespace llmd::epp::predictor_client
