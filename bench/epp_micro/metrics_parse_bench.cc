// What a scrape answer costs the EPP outside the network: parse_vllm_metrics on the body
// bench/epp_overhead's fake pods serve (4 lines) and on one the size and shape of a real vLLM
// pod's (402 lines, 40 KB; tests/epp/datastore/vllm_exposition.h), and a whole scrape on
// loopback (AsyncHttpClient GET against an in-process server; the server's side included).
// Counter `bytes`: the body's size.
#include <benchmark/benchmark.h>

#include <future>
#include <string>

#include "common/http/async_client.h"
#include "epp/datastore/metrics_parser.h"
#include "tests/common/http_test_util.h"
#include "tests/epp/datastore/vllm_exposition.h"

namespace {

const std::string kSmall =
    "vllm:num_requests_waiting{model_name=\"m\"} 0\nvllm:num_requests_running{model_name=\"m\"} 1\n"
    "vllm:kv_cache_usage_perc{model_name=\"m\"} 0.1\n"
    "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"31250\"} 1\n";

const std::string& body(int64_t which) {
  static const std::string real = llmd::epp::testing::vllm_exposition();
  return which == 0 ? kSmall : real;
}

void BM_Parse(benchmark::State& state) {
  const std::string& text = body(state.range(0));
  for (auto _ : state) {
    auto m = llmd::epp::parse_vllm_metrics(text);
    benchmark::DoNotOptimize(m);
  }
  state.counters["bytes"] = static_cast<double>(text.size());
}
BENCHMARK(BM_Parse)->Arg(0)->Arg(1);

void BM_ScrapeOnLoopback(benchmark::State& state) {
  const std::string text = body(state.range(0));
  auto options = llmd::http::testing::local_options();
  options.io_threads = 1;
  llmd::http::testing::RunningServer server(options, [&text](llmd::http::Request&) {
    return llmd::http::Response::text(200, text, "text/plain");
  });
  llmd::http::AsyncHttpClient client(std::vector<llmd::http::Url>{});
  llmd::http::Url url;
  url.host = "127.0.0.1";
  url.port = server.port();
  for (auto _ : state) {
    std::promise<bool> done;
    client.request(
        url, "GET", "/metrics", {}, std::chrono::seconds(5), [&done](llmd::http::AsyncResponse r) {
          done.set_value(r.status == 200 && llmd::epp::parse_vllm_metrics(r.body).has_value());
        });
    if (!done.get_future().get()) {
      state.SkipWithError("scrape failed");
      break;
    }
  }
  state.counters["bytes"] = static_cast<double>(text.size());
}
BENCHMARK(BM_ScrapeOnLoopback)->Arg(0)->Arg(1)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
