#include "epp/predictor_client/client_metrics.h"

namespace llmd::epp::predictor_client {

ClientMetrics::ClientMetrics(prometheus::Registry& registry,
                             const std::vector<std::string>& replicas) {
  auto& rows = prometheus::BuildHistogram()
                   .Name("llmd_epp_predictor_batch_rows")
                   .Help("Rows per batch sent to a predictor")
                   .Register(registry);
  batch_rows = &rows.Add({}, prometheus::Histogram::BucketBoundaries{1, 2, 5, 10, 20, 50, 100, 200,
                                                                     500, 1000, 2000, 5000, 10000});
  auto& callers = prometheus::BuildHistogram()
                      .Name("llmd_epp_predictor_batch_callers")
                      .Help("Scheduling requests (callers) coalesced into one batch")
                      .Register(registry);
  batch_callers = &callers.Add(
      {}, prometheus::Histogram::BucketBoundaries{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128, 256});
  auto& dispatch = prometheus::BuildHistogram()
                       .Name("llmd_epp_predictor_dispatch_seconds")
                       .Help("Time of one batch POST to a predictor replica, answer or not")
                       .Register(registry);
  auto& healthy = prometheus::BuildGauge()
                      .Name("llmd_epp_predictor_replica_healthy")
                      .Help(
                          "1 when the predictor replica gets traffic, 0 while it waits for a "
                          "successful /readyz probe")
                      .Register(registry);
  auto& columnar = prometheus::BuildGauge()
                       .Name("llmd_epp_predictor_replica_columnar")
                       .Help(
                           "1 while batches to the predictor replica use /predict/bulk/columnar, "
                           "0 while it gets /predict/bulk/strict after a 404/405 there (until a "
                           "periodic retry or its re-admission finds the path served)")
                       .Register(registry);
  const prometheus::Histogram::BucketBoundaries dispatch_buckets{
      0.0002, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25, 1};
  wait_seconds = &prometheus::BuildHistogram()
                      .Name("llmd_epp_predictor_wait_seconds")
                      .Help(
                          "A scheduling request's wait from submitting its rows to its "
                          "predictions: the coalescing window, the wait for a call slot and "
                          "the round trip (answered requests only)")
                      .Register(registry)
                      .Add({}, dispatch_buckets);
  for (const auto& r : replicas) {
    dispatch_seconds.push_back(&dispatch.Add({{"replica", r}}, dispatch_buckets));
    auto* g = &healthy.Add({{"replica", r}});
    g->Set(1);
    replica_healthy.push_back(g);
    auto* c = &columnar.Add({{"replica", r}});
    c->Set(1);
    replica_columnar.push_back(c);
  }
  auto& bytes = prometheus::BuildCounter()
                    .Name("llmd_epp_predictor_body_bytes_total")
                    .Help(
                        "Bytes of the prediction request bodies sent to predictors and of the "
                        "answer bodies received (every attempt)")
                    .Register(registry);
  bytes_sent = &bytes.Add({{"direction", "sent"}});
  bytes_received = &bytes.Add({{"direction", "received"}});
  auto& errs = prometheus::BuildCounter()
                   .Name("llmd_epp_predictor_errors_total")
                   .Help(
                       "Predictor client failures by kind (failed dispatch attempts, and "
                       "callers that reached their deadline)")
                   .Register(registry);
  for (std::size_t i = 0; i < kErrorKindCount; ++i) {
    errors[i] = &errs.Add({{"kind", std::string(kErrorKindNames[i])}});
  }
  call_limit = &prometheus::BuildGauge()
                    .Name("llmd_epp_predictor_call_limit")
                    .Help(
                        "Prediction calls the client accepts in flight at once (AIMD on their "
                        "outcome); calls past it fall back at once (errors{kind=\"shed\"})")
                    .Register(registry)
                    .Add({});
}

}  // namespace llmd::epp::predictor_client
