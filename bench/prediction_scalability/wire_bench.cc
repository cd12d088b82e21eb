// The prediction exchange's CPU outside the network, per batch, on the serving shape: one
// scheduling request's rows for 100 candidate pods (one prompt length, per-pod load), and
// 1,000 rows (ten such requests coalesced), in both formats (strict and columnar). EPP side:
// encode the request, read the answer; predictor side: parse the request. Counter `bytes`: the
// body's size.
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "epp/predictor_client/wire.h"
#include "predictor/fast_rows.h"

namespace {

using llmd::features::FeatureInput;
namespace wire = llmd::epp::predictor_client;

// `callers` scheduling requests of 100 pods each, as the predicted-latency producer builds them.
std::vector<FeatureInput> rows(std::size_t callers) {
  std::mt19937_64 rng(42);
  std::vector<FeatureInput> out;
  for (std::size_t c = 0; c < callers; ++c) {
    const int64_t prompt = 200 + static_cast<int64_t>(rng() % 4000);
    for (int pod = 0; pod < 100; ++pod) {
      FeatureInput f;
      f.kv_cache_percentage = static_cast<double>(rng() % 8192) / 8192.0;  // blocks in use
      f.input_token_length = prompt;
      f.num_request_waiting = rng() % 4 == 0 ? static_cast<int64_t>(rng() % 5) : 0;
      f.num_request_running = static_cast<int64_t>(rng() % 48);
      f.num_tokens_generated = 1;
      f.prefix_cache_score = rng() % 3 == 0 ? static_cast<double>(rng() % 64) / 64.0 : 0.0;
      f.prefill_tokens_in_flight = static_cast<int64_t>(rng() % 12000);
      f.decode_tokens_in_flight = static_cast<int64_t>(rng() % 30000);
      out.push_back(f);
    }
  }
  return out;
}

// What the predictor writes for n rows: full-precision bounds, microsecond estimates, and the
// metadata of predictor/routes.cc.
struct Answer {
  std::vector<double> ttft, tpot, ttft_expected, tpot_expected;
};
Answer answer(std::size_t n) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Answer a;
  for (std::size_t i = 0; i < n; ++i) {
    a.ttft.push_back(20.0 + 400.0 * u(rng));
    a.tpot.push_back(5.0 + 30.0 * u(rng));
    a.ttft_expected.push_back(std::floor(a.ttft.back() * 800.0) / 1000.0);
    a.tpot_expected.push_back(std::floor(a.tpot.back() * 800.0) / 1000.0);
  }
  return a;
}
constexpr const char* kMeta =
    R"("predicted_at":"2026-11-26T09:00:00.123456Z","model_type":"xgboost",)"
    R"("objective_type":"quantile","quantile":0.9,"last_model_load":"2026-11-26T08:59:58.000001Z")";

std::string strict_answer(std::size_t n) {
  const Answer a = answer(n);
  std::string out = R"({"predictions":[)";
  for (std::size_t i = 0; i < n; ++i) {
    out += fmt::format(R"({}{{"ttft_ms":{},"tpot_ms":{},"ttft_expected_ms":{:.3f},)"
                       R"("tpot_expected_ms":{:.3f},{}}})",
                       i > 0 ? "," : "", a.ttft[i], a.tpot[i], a.ttft_expected[i],
                       a.tpot_expected[i], kMeta);
  }
  out += fmt::format(R"(],"total_requests":{0},"successful_predictions":{0},)"
                     R"("failed_predictions":0,"processing_time_ms":0.137}})",
                     n);
  return out;
}

void BM_StrictEncode(benchmark::State& state) {
  const auto r = rows(static_cast<std::size_t>(state.range(0)));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string body = wire::encode_bulk_request(r);
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_StrictEncode)->Arg(1)->Arg(10);

void BM_StrictParseAnswer(benchmark::State& state) {
  const std::string body = strict_answer(static_cast<std::size_t>(state.range(0)) * 100);
  for (auto _ : state) {
    auto p = wire::parse_bulk_response(body);
    benchmark::DoNotOptimize(p);
  }
  state.counters["bytes"] = static_cast<double>(body.size());
}
BENCHMARK(BM_StrictParseAnswer)->Arg(1)->Arg(10);

void BM_PredictorParseStrict(benchmark::State& state) {
  const std::string body =
      wire::encode_bulk_request(rows(static_cast<std::size_t>(state.range(0))));
  std::vector<FeatureInput> out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(llmd::predictor::parse_bulk_fast(body, 1, 10000, out));
  }
}
BENCHMARK(BM_PredictorParseStrict)->Arg(1)->Arg(10);

std::string columnar_answer(std::size_t n) {
  const Answer a = answer(n);
  std::string out = "{";
  auto column = [&](const char* key, const std::vector<double>& v, bool ms) {
    out += fmt::format(R"({}"{}":[)", out.size() > 1 ? "," : "", key);
    for (std::size_t i = 0; i < n; ++i) {
      out += i > 0 ? "," : "";
      out += ms ? fmt::format("{:.3f}", v[i]) : fmt::format("{}", v[i]);
    }
    out += "]";
  };
  column("ttft_ms", a.ttft, false);
  column("tpot_ms", a.tpot, false);
  column("ttft_expected_ms", a.ttft_expected, true);
  column("tpot_expected_ms", a.tpot_expected, true);
  out += fmt::format(R"(,{},"processing_time_ms":0.101}})", kMeta);
  return out;
}

void BM_ColumnarEncode(benchmark::State& state) {
  const auto r = rows(static_cast<std::size_t>(state.range(0)));
  std::size_t bytes = 0;
  for (auto _ : state) {
    std::string body = wire::encode_columnar_request(r);
    bytes = body.size();
    benchmark::DoNotOptimize(body);
  }
  state.counters["bytes"] = static_cast<double>(bytes);
}
BENCHMARK(BM_ColumnarEncode)->Arg(1)->Arg(10);

void BM_ColumnarParseAnswer(benchmark::State& state) {
  const std::size_t n = static_cast<std::size_t>(state.range(0)) * 100;
  const std::string body = columnar_answer(n);
  for (auto _ : state) {
    auto p = wire::parse_columnar_response(body, n);
    benchmark::DoNotOptimize(p);
  }
  state.counters["bytes"] = static_cast<double>(body.size());
}
BENCHMARK(BM_ColumnarParseAnswer)->Arg(1)->Arg(10);

void BM_PredictorParseColumnar(benchmark::State& state) {
  const std::string body =
      wire::encode_columnar_request(rows(static_cast<std::size_t>(state.range(0))));
  std::vector<FeatureInput> out;
  for (auto _ : state) {
    benchmark::DoNotOptimize(llmd::predictor::parse_columns_fast(body, 10000, out));
  }
}
BENCHMARK(BM_PredictorParseColumnar)->Arg(1)->Arg(10);

}  // namespace

BENCHMARK_MAIN();
