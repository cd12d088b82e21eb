#include "epp/feedback/request_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>

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

// The buckets resolve the latencies pods produce: a TPOT of 5.1 ms and a TTFT of 5.5 ms land in
// 1-ms buckets (5-6 ms), so a quantile read off them is off by less than 1 ms; the central
// estimates (expected TTFT / TPOT) sit beside the p90 bounds with the same buckets.
TEST(RequestMetricsLatency, BucketsResolveMillisecondsAndExpectedSitsBesideTheBound) {
  prometheus::Registry registry;
  ModelLabels labels;
  RequestMetrics metrics(registry, labels);
  CompletedRequest r;
  r.request.model = "m";
  r.request.streaming = true;
  r.success = true;
  r.status = 200;
  r.first_token = true;
  r.ttft_ms = 5.5;
  r.completion_tokens = 11;
  r.e2e_ms = 5.5 + 10 * 5.1;
  LatencyPredictionInfo l;
  l.predicted_ttft_ms = 9.5;
  l.expected_ttft_ms = 5.5;
  l.predicted_tpot_ms = 7.5;
  l.expected_tpot_ms = 5.1;
  r.pod.latency = l;
  metrics.on_completed(r);
  const std::string text = metrics::serialize(registry);
  // le -> cumulative count of one histogram's buckets.
  auto buckets = [&](const std::string& name) {
    std::map<double, double> out;
    const std::string prefix = name + "_bucket{";
    for (auto at = text.find(prefix); at != std::string::npos; at = text.find(prefix, at + 1)) {
      const auto le = text.find("le=\"", at) + 4;
      const std::string edge = text.substr(le, text.find('"', le) - le);
      const auto space = text.find("} ", at);
      out[edge == "+Inf" ? 1e300 : std::stod(edge)] =
          std::stod(text.substr(space + 2, text.find('\n', space) - space - 2));
    }
    return out;
  };
  // The count of observations in (lo, hi] of `name`.
  auto in = [&](const std::string& name, double lo, double hi) {
    const auto b = buckets(name);
    auto edge = [&](double v) {
      for (const auto& [le, n] : b) {
        if (std::abs(le - v) < 1e-9) {
          return n;
        }
      }
      ADD_FAILURE() << name << ": no bucket le=" << v;
      return -1.0;
    };
    return edge(hi) - edge(lo);
  };
  EXPECT_EQ(in("inference_objective_request_tpot_seconds", 0.005, 0.006), 1);
  EXPECT_EQ(in("inference_objective_request_ttft_seconds", 0.005, 0.006), 1);
  EXPECT_EQ(in("llmd_epp_request_expected_tpot_seconds", 0.005, 0.006), 1);
  EXPECT_EQ(in("llmd_epp_request_expected_ttft_seconds", 0.005, 0.006), 1);
  EXPECT_EQ(in("inference_objective_request_predicted_tpot_seconds", 0.007, 0.008), 1);
  EXPECT_EQ(in("inference_objective_request_predicted_ttft_seconds", 0.009, 0.010), 1);
  for (int ms = 1; ms < 20; ++ms) {  // 1-ms steps up to 20 ms
    EXPECT_GE(in("inference_objective_request_tpot_seconds", ms / 1000.0, (ms + 1) / 1000.0), 0);
    EXPECT_GE(in("inference_objective_request_ttft_seconds", ms / 1000.0, (ms + 1) / 1000.0), 0);
  }
  // Sane bucket counts (+Inf included): one series per model pair stays small.
  EXPECT_LE(buckets("inference_objective_request_ttft_seconds").size(), 40u);
  EXPECT_LE(buckets("inference_objective_request_tpot_seconds").size(), 33u);
  EXPECT_EQ(buckets("inference_objective_request_ttft_seconds").rbegin()->second, 1);
}

}  // namespace
}  // namespace llmd::epp
