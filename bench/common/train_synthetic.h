#pragma once
// Benchmarks that need a realistic model: feed a running trainer `n` samples of the synthetic
// law and wait (bounded) until it has published a retrained TTFT ensemble and TPOT model.
#include <chrono>
#include <random>
#include <stdexcept>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/features/feature_json.h"
#include "common/http/client.h"
#include "common/testing/synthetic_law.h"

namespace llmd::bench {

inline void train_synthetic(uint16_t trainer_port, int n, std::chrono::seconds timeout) {
  using Json = nlohmann::json;
  http::HttpClient tc("127.0.0.1", trainer_port, std::chrono::seconds(30));
  testing::SyntheticLaw law;
  std::mt19937_64 rng(1);
  Json entries = Json::array();
  for (int i = 0; i < n; ++i) {
    auto f = law.draw_features(rng);
    Json e = features::feature_input_to_json(f);
    e["actual_ttft_ms"] = law.draw_ttft(f, rng);
    e["actual_tpot_ms"] = law.draw_tpot(f, rng);
    entries.push_back(e);
  }
  if (tc.post("/add_training_data_bulk", Json{{"entries", entries}}.dump()).status != 202) {
    throw std::runtime_error("trainer refused the synthetic samples");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto gated = tc.get("/model/ttft_gated/info");
    auto tpot = tc.get("/model/tpot/info");
    if (gated.status == 200 && tpot.status == 200 &&
        Json::parse(tpot.body)["version"].get<int64_t>() > 1) {
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  throw std::runtime_error("trainer published no retrained model in time");
}

}  // namespace llmd::bench
