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
  RequestMetrics metrics(registry);
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
            std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find("code=\"429\",model_name=\"llama\""), std::string::npos);
  EXPECT_LT(text.size(), 200000u);
}

TEST(RequestMetricsLabels, AtMostTheCapOfServedNames) {
  prometheus::Registry registry;
  RequestMetrics metrics(registry);
  for (std::size_t i = 0; i < RequestMetrics::kMaxModelLabels + 50; ++i) {
    CompletedRequest ok;
    ok.request.model = "m" + std::to_string(i);
    ok.success = true;
    ok.status = 200;
    metrics.on_completed(ok);
  }
  const std::string text = metrics::serialize(registry);
  EXPECT_EQ(count(text, "llmd_epp_requests_total{code=\"200\",model_name=\"m"),
            RequestMetrics::kMaxModelLabels);
  EXPECT_NE(text.find("code=\"200\",model_name=\"other\""), std::string::npos);
}

}  // namespace
}  // namespace llmd::epp
