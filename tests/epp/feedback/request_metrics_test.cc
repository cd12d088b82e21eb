#include "epp/feedback/request_metrics.h"

#include <gtest/gtest.h>

#include <prometheus/registry.h>

#include "common/metrics/exposition.h"

namespace llmd::epp {
namespace {

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++n;
  }
  return n;
}

// A client cannot grow /metrics: names no pod has served share the "other" label.
TEST(RequestMetricsLabels, UnservedModelNamesFoldIntoOther) {
  prometheus::Registry registry;
  ModelLabels labels;
  RequestMetrics metrics(registry, labels);
  CompletedRequest ok;
  ok.request.model = "llama";
  ok.success = true;
  ok.status = 200;
  metrics.on_completed(ok);
  for (int i = 0; i < 2000; ++i) {
    CompletedRequest bad;
    bad.request.model = "scan-" + std::to_string(i);
    bad.status = 404;
    metrics.on_completed(bad);
    metrics.on_rejected("typo-" + std::to_string(i), 400);
  }
  metrics.on_rejected("llama", 429);  // a served model keeps its own series
  const std::string text = metrics::serialize(registry);
  EXPECT_EQ(count(text, "scan-"), 0u);
  EXPECT_EQ(count(text, "typo-"), 0u);
  EXPECT_NE(text.find("llmd_epp_requests_total{code=\"404\",model_name=\"other\""),
            std::string::npos)
      << text.substr(0, 2000);
  EXPECT_NE(text.find("code=\"429\",model_name=\"llama\""), std::string::npos);
  EXPECT_LT(text.size(), 200000u);
}

TEST(RequestMetricsLabels, AtMostTheCapOfServedNames) {
  prometheus::Registry registry;
  ModelLabels labels;
  RequestMetrics metrics(registry, labels);
  for (std::size_t i = 0; i < ModelLabels::kMax + 50; ++i) {
    CompletedRequest ok;
    ok.request.model = "m" + std::to_string(i);
    ok.success = true;
    ok.status = 200;
    metrics.on_completed(ok);
  }
  const std::string text = metrics::serialize(registry);
  EXPECT_EQ(count(text, "llmd_epp_requests_total{code=\"200\",model_name=\"m"), ModelLabels::kMax);
  EXPECT_NE(text.find("code=\"200\",model_name=\"other\""), std::string::npos);
}

// A rejection before the model's first successful answer carries the model's name when the
// pool serves it; names the pool does not serve still fold into "other".
TEST(RequestMetricsLabels, NamesThePoolServesLabelRejectionsBeforeAnySuccess) {
  prometheus::Registry registry;
  ModelLabels labels;
  RequestMetrics metrics(registry, labels);
  labels.set_pool_serves([](const std::string& m) { return m == "org/llama"; });
  metrics.on_rejected("org/llama", 429);
  metrics.on_rejected("org/llama", 503);
  metrics.on_rejected("typo", 503);
  CompletedRequest failed;
  failed.request.model = "org/llama";
  failed.status = 502;
  metrics.on_completed(failed);
  const std::string text = metrics::serialize(registry);
  EXPECT_NE(text.find("code=\"429\",model_name=\"org/llama\""), std::string::npos) << text;
  EXPECT_NE(text.find("code=\"503\",model_name=\"org/llama\""), std::string::npos);
  EXPECT_NE(text.find("code=\"502\",model_name=\"org/llama\""), std::string::npos);
  EXPECT_NE(text.find("code=\"503\",model_name=\"other\""), std::string::npos);
  EXPECT_EQ(count(text, "typo"), 0u);
}

// TTFT (and its gauge, SLO threshold and violations) only for answers with a first token:
// streams. The end-to-end duration is observed for every answered request.
TEST(RequestMetricsLatency, TtftOnlyForStreamsDurationForAll) {
  prometheus::Registry registry;
  ModelLabels labels;
  RequestMetrics metrics(registry, labels);
  auto answered = [](bool stream, double ttft_ms, double e2e_ms) {
    CompletedRequest r;
    r.request.model = "m";
    r.request.streaming = stream;
    r.request.slo_ttft_ms = 1.0;  // every one misses it
    r.success = true;
    r.status = 200;
    r.first_token = stream;
    r.ttft_ms = ttft_ms;
    r.e2e_ms = e2e_ms;
    r.dispatch_delay_ms = 10;
    return r;
  };
  for (int i = 0; i < 10; ++i) {
    metrics.on_completed(answered(false, 1000, 1000));  // non-streaming: ttft_ms = e2e
  }
  metrics.on_completed(answered(true, 40, 500));
  const std::string text = metrics::serialize(registry);
  auto value = [&](const std::string& series) {
    const auto at = text.find(series + "{");
    EXPECT_NE(at, std::string::npos) << series;
    const auto space = text.find("} ", at);
    return std::stod(text.substr(space + 2, text.find('\n', space) - space - 2));
  };
  EXPECT_EQ(value("inference_objective_request_ttft_seconds_count"), 1);
  EXPECT_NEAR(value("inference_objective_request_ttft_seconds_sum"), 0.05, 1e-9);
  EXPECT_NEAR(value("inference_objective_request_ttft_seconds_gauge"), 0.05, 1e-9);
  EXPECT_EQ(value("inference_objective_request_ttft_slo_violation_total"), 1);
  EXPECT_EQ(value("inference_objective_request_duration_seconds_count"), 11);
  EXPECT_NEAR(value("inference_objective_request_duration_seconds_sum"), 10 * 1.01 + 0.51, 1e-9);
}

}  // namespace
}  // namespace llmd::epp
