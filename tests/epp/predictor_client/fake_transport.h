#pragma once
// Test doubles for the predictor client: a fixed Rng, a fake predictor that reads a
// /predict/bulk/strict or /predict/bulk/columnar body with the contract's own readers, and a
// Transport whose answers come from a handler function. Everything is thread-safe: exchanges
// run concurrently.
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <prometheus/registry.h>

#include "common/features/feature_json.h"
#include "common/json/validation.h"
#include "epp/interface/rng.h"
#include "epp/predictor_client/transport.h"

namespace llmd::epp::predictor_client::testing {

class FixedRng final : public Rng {
 public:
  explicit FixedRng(double value) : Rng(0), value_(value) {}
  double uniform() override { return value_; }

 private:
  double value_;
};

// Reads a bulk body as the predictor would (422 on any invalid row); nullopt when invalid.
inline std::optional<std::vector<features::FeatureInput>> read_bulk_rows(const std::string& body) {
  json::Errors errors;
  auto parsed = json::parse_body(body, errors);
  if (!parsed || !parsed->is_object() || !parsed->contains("requests") ||
      !(*parsed)["requests"].is_array()) {
    return std::nullopt;
  }
  std::vector<features::FeatureInput> rows;
  json::Loc loc;
  for (const auto& item : (*parsed)["requests"]) {
    features::FeatureInput row;
    if (!item.is_object() || !features::read_feature_input(item, loc, errors, row)) {
      return std::nullopt;
    }
    rows.push_back(row);
  }
  return rows;
}

// Reads a columnar body as the predictor would (422 on any invalid value); nullopt when invalid.
inline std::optional<std::vector<features::FeatureInput>> read_columnar_rows(
    const std::string& body) {
  json::Errors errors;
  auto parsed = json::parse_body(body, errors);
  std::vector<features::FeatureInput> rows;
  json::Loc loc;
  if (!parsed || !parsed->is_object() ||
      !features::read_feature_columns(*parsed, loc, errors, 10000, rows)) {
    return std::nullopt;
  }
  return rows;
}

// The fake predictor's law: ttft = input_token_length, tpot = running + 0.5.
inline double fake_ttft(const features::FeatureInput& r) {
  return static_cast<double>(r.input_token_length);
}
inline double fake_tpot(const features::FeatureInput& r) {
  return static_cast<double>(r.num_request_running) + 0.5;
}

// A /predict/bulk/strict answer shaped like the real predictor's, with `drop` rows missing.
inline std::string bulk_answer(const std::vector<features::FeatureInput>& rows,
                               std::size_t drop = 0) {
  nlohmann::json predictions = nlohmann::json::array();
  for (std::size_t i = 0; i + drop < rows.size(); ++i) {
    predictions.push_back({{"ttft_ms", fake_ttft(rows[i])},
                           {"tpot_ms", fake_tpot(rows[i])},
                           {"predicted_at", "2026-01-01T00:00:00Z"},
                           {"model_type", "xgboost"},
                           {"objective_type", "quantile"},
                           {"quantile", 0.9},
                           {"last_model_load", nullptr}});
  }
  return nlohmann::json{{"predictions", predictions},
                        {"total_requests", rows.size()},
                        {"successful_predictions", rows.size()},
                        {"failed_predictions", 0},
                        {"processing_time_ms", 0.1}}
      .dump();
}

// A /predict/bulk/columnar answer shaped like the real predictor's, with `drop` rows missing.
inline std::string columnar_answer(const std::vector<features::FeatureInput>& rows,
                                   std::size_t drop = 0) {
  nlohmann::json ttft = nlohmann::json::array(), tpot = nlohmann::json::array();
  for (std::size_t i = 0; i + drop < rows.size(); ++i) {
    ttft.push_back(fake_ttft(rows[i]));
    tpot.push_back(fake_tpot(rows[i]));
  }
  return nlohmann::json{{"ttft_ms", ttft},
                        {"tpot_ms", tpot},
                        {"ttft_expected_ms", ttft},
                        {"tpot_expected_ms", tpot},
                        {"predicted_at", "2026-01-01T00:00:00Z"},
                        {"model_type", "xgboost"},
                        {"objective_type", "quantile"},
                        {"quantile", 0.9},
                        {"last_model_load", nullptr},
                        {"processing_time_ms", 0.1}}
      .dump();
}

// The answer of the bulk path `path` (columnar or strict) for `rows`, `drop` rows short.
inline std::string answer_for(const std::string& path,
                              const std::vector<features::FeatureInput>& rows,
                              std::size_t drop = 0) {
  return path == "/predict/bulk/columnar" ? columnar_answer(rows, drop) : bulk_answer(rows, drop);
}

// Rows whose input_token_length identifies them: base, base+1, ...
inline std::vector<features::FeatureInput> make_rows(std::size_t n, int64_t base) {
  std::vector<features::FeatureInput> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i].input_token_length = base + static_cast<int64_t>(i);
    out[i].num_request_running = static_cast<int64_t>(i % 7);
    out[i].kv_cache_percentage = 0.25;
  }
  return out;
}

class FakeTransport final : public Transport {
 public:
  struct Call {
    std::size_t replica;
    std::string method;
    std::string path;
    std::size_t rows;            // rows in the body (0 for GET)
    std::thread::id started_on;  // the thread that called exchange_async
  };
  using Handler = std::function<TransportResponse(std::size_t replica, const std::string& path,
                                                  const std::vector<features::FeatureInput>& rows)>;

  // A replica that answers everything correctly.
  static TransportResponse healthy(std::size_t, const std::string& path,
                                   const std::vector<features::FeatureInput>& rows) {
    if (path == "/readyz") {
      return TransportResponse::ok(200, R"({"status":"ready"})");
    }
    return TransportResponse::ok(200, answer_for(path, rows));
  }

  explicit FakeTransport(Handler handler = healthy) : handler_(std::move(handler)) {}
  // Waits for every exchange's thread (a handler that blocks must be released first).
  ~FakeTransport() override {
    std::vector<std::thread> threads;
    {
      std::lock_guard lk(mu_);
      threads.swap(threads_);
    }
    for (auto& t : threads) {
      t.join();
    }
  }

  // Each exchange runs the handler on a thread of its own, as a network answer arrives on a
  // thread the caller does not own; handlers may block (stalled replicas).
  void exchange_async(std::size_t replica, std::string_view method, std::string_view path,
                      const std::string& body, std::chrono::milliseconds,
                      ResponseCallback done) override {
    std::lock_guard lk(mu_);
    threads_.emplace_back([this, replica, m = std::string(method), p = std::string(path), b = body,
                           from = std::this_thread::get_id(),
                           done = std::move(done)] { done(run(replica, m, p, b, from)); });
  }

  std::vector<Call> calls() const {
    std::lock_guard lk(mu_);
    return calls_;
  }
  std::vector<Call> posts() const {
    std::vector<Call> out;
    for (auto& c : calls()) {
      if (c.method == "POST") {
        out.push_back(c);
      }
    }
    return out;
  }
  int invalid_bodies() const {
    std::lock_guard lk(mu_);
    return invalid_bodies_;
  }

 private:
  TransportResponse run(std::size_t replica, const std::string& method, const std::string& path,
                        const std::string& body, std::thread::id from) {
    std::vector<features::FeatureInput> rows;
    if (method == "POST") {
      auto parsed =
          path == "/predict/bulk/columnar" ? read_columnar_rows(body) : read_bulk_rows(body);
      if (!parsed) {
        std::lock_guard lk(mu_);
        ++invalid_bodies_;
        return TransportResponse::ok(422, R"({"detail":[]})");
      }
      rows = std::move(*parsed);
    }
    {
      std::lock_guard lk(mu_);
      calls_.push_back(Call{replica, method, path, rows.size(), from});
    }
    return handler_(replica, path, rows);
  }

  Handler handler_;
  mutable std::mutex mu_;
  std::vector<Call> calls_;
  std::vector<std::thread> threads_;
  int invalid_bodies_ = 0;
};

// Value of a counter/gauge or the sample count/sum of a histogram, by family name and one
// optional label; -1 when absent.
inline double metric_value(prometheus::Registry& registry, const std::string& family,
                           const std::string& label = {}, const std::string& value = {},
                           bool histogram_sum = false) {
  for (const auto& f : registry.Collect()) {
    if (f.name != family) {
      continue;
    }
    for (const auto& m : f.metric) {
      bool match = label.empty();
      for (const auto& l : m.label) {
        match = match || (l.name == label && l.value == value);
      }
      if (!match) {
        continue;
      }
      switch (f.type) {
        case prometheus::MetricType::Counter:
          return m.counter.value;
        case prometheus::MetricType::Gauge:
          return m.gauge.value;
        case prometheus::MetricType::Histogram:
          return histogram_sum ? m.histogram.sample_sum
                               : static_cast<double>(m.histogram.sample_count);
        default:
          return -1;
      }
    }
  }
  return -1;
}

}  // namespace llmd::epp::predictor_client::testing
