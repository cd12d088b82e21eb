// Feeds a trainer with samples from the known synthetic latency law and prints what the trainer
// predicts before and after it retrains. Used by the README's main command (scripts/run-stack.sh)
// and handy for poking a live trainer:  synthetic_feed --url http://127.0.0.1:8000 --samples 3000
#include <chrono>
#include <cstdio>
#include <iostream>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/config/options.h"
#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "common/testing/synthetic_law.h"

using namespace llmd;
using Json = nlohmann::json;

namespace {

Json predict(http::HttpClient& c, const features::FeatureInput& f) {
  auto r = c.post("/predict", features::feature_input_to_json(f).dump());
  if (r.status != 200) {
    throw std::runtime_error("POST /predict -> " + std::to_string(r.status) + " " + r.body +
                             r.error);
  }
  return Json::parse(r.body);
}

void print_table(http::HttpClient& c, const testing::SyntheticLaw& law, const char* title) {
  std::printf("\n%s\n", title);
  std::printf(
      "| input tokens | waiting | kv   | true TTFT p90 | predicted TTFT | true TPOT p90 | "
      "predicted TPOT |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const double factor = law.quantile_factor(1.2815515655446004);
  for (int64_t input : {200, 1000, 3000}) {
    for (int64_t waiting : {0, 4}) {
      features::FeatureInput f;
      f.input_token_length = input;
      f.num_request_waiting = waiting;
      f.num_request_running = 8;
      f.kv_cache_percentage = 0.4;
      f.num_tokens_generated = 100;
      Json p = predict(c, f);
      std::printf("| %lld | %lld | 0.40 | %.1f ms | %.1f ms | %.1f ms | %.1f ms |\n",
                  static_cast<long long>(input), static_cast<long long>(waiting),
                  law.ttft_mean(f) * factor, p["ttft_ms"].get<double>(), law.tpot_mean(f) * factor,
                  p["tpot_ms"].get<double>());
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    config::Options o("synthetic_feed", "Feed a trainer with synthetic latency samples");
    o.add("url", "", "http://127.0.0.1:8000", "Trainer base URL");
    o.add("samples", "", "3000", "Samples to send");
    o.add("batch", "", "500", "Entries per /add_training_data_bulk request");
    o.add("seed", "", "1", "Random seed");
    o.add("wait-retrain-sec", "", "60", "How long to wait for a retrained model (0 = do not wait)");
    if (!o.parse(argc, argv)) {
      return 0;
    }
    auto url = http::parse_url(o.str("url"));
    if (!url) {
      throw std::invalid_argument("--url: expected http://host:port");
    }
    http::HttpClient c(url->host, url->port, std::chrono::seconds(30));
    testing::SyntheticLaw law;
    print_table(c, law, "Before training (cold-start default models):");
    const auto version = [&] {
      auto r = c.get("/model/ttft/info");
      return r.status == 200 ? Json::parse(r.body)["version"].get<int64_t>() : 0;
    };
    const int64_t v0 = version();
    std::mt19937_64 rng(static_cast<uint64_t>(o.integer("seed")));
    const int64_t total = o.integer("samples", 1);
    const int64_t batch = o.integer("batch", 1, 100000);
    auto start = std::chrono::steady_clock::now();
    for (int64_t sent = 0; sent < total;) {
      Json entries = Json::array();
      for (int64_t i = 0; i < batch && sent < total; ++i, ++sent) {
        auto f = law.draw_features(rng);
        Json e = features::feature_input_to_json(f);
        e["actual_ttft_ms"] = law.draw_ttft(f, rng);
        e["actual_tpot_ms"] = law.draw_tpot(f, rng);
        entries.push_back(std::move(e));
      }
      auto r = c.post("/add_training_data_bulk", Json{{"entries", entries}}.dump());
      if (r.status != 202) {
        throw std::runtime_error("ingest failed: " + std::to_string(r.status) + " " + r.body +
                                 r.error);
      }
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::printf("\nSent %lld samples in %.2f s (%.0f samples/s)\n", static_cast<long long>(total),
                secs, static_cast<double>(total) / secs);
    const int64_t wait_s = o.integer("wait-retrain-sec", 0);
    if (wait_s > 0) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(wait_s);
      while (version() <= v0 && std::chrono::steady_clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      }
      if (version() <= v0) {
        std::printf("No retrained model within %lld s\n", static_cast<long long>(wait_s));
        return 1;
      }
      print_table(c, law, "After retraining (quantile p90 models):");
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "synthetic_feed: " << e.what() << std::endl;
    return 1;
  }
}
