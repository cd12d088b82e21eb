#include "epp/predictor_client/in_process_predictions.h"

#include <filesystem>
#include <stdexcept>

#include <prometheus/histogram.h>
#include <prometheus/registry.h>
#include <spdlog/spdlog.h>

#include "common/http/client.h"
#include "epp/predictor_client/wire.h"
#include "predictor/model_store.h"
#include "predictor/model_sync.h"

namespace llmd::epp::predictor_client {

namespace {

predictor::SyncConfig sync_config(const InProcessPredictionsConfig& c) {
  if (!http::parse_url(c.trainer_url)) {
    throw std::invalid_argument(
        "in-process predictions need the trainer's URL "
        "(http://host:port), got '" +
        c.trainer_url + "'");
  }
  predictor::SyncConfig s;
  s.trainer_url = c.trainer_url;
  s.interval_sec = std::chrono::duration<double>(c.sync_interval).count();
  s.timeout = c.sync_timeout;
  if (!c.model_dir.empty()) {
    const std::filesystem::path d(c.model_dir);
    s.local_paths = {{"ttft", (d / "ttft.ubj").string()},
                     {"tpot", (d / "tpot.ubj").string()},
                     {"ttft_gated", (d / "ttft_gated.bin").string()},
                     {"tpot_gated", (d / "tpot_gated.bin").string()}};
  }
  return s;
}

}  // namespace

std::vector<Prediction> predict_rows(const predictor::ServingModels& models,
                                     std::span<const features::FeatureInput> rows) {
  const std::size_t n = rows.size();
  std::vector<features::FeatureInput> accepted;
  accepted.reserve(n);
  for (const auto& r : rows) {
    accepted.push_back(accepted_row(r));
  }
  std::vector<double> ttft(n), tpot(n), ttft_point(n), tpot_point(n);
  models.ttft.predict_batch(accepted.data(), n, ttft.data(), ttft_point.data());
  models.tpot.predict_batch(accepted.data(), n, tpot.data(), tpot_point.data());
  std::vector<Prediction> out(n);
  for (std::size_t i = 0; i < n; ++i) {
    out[i] = {ttft[i], tpot[i], ttft_point[i], tpot_point[i]};
  }
  return out;
}

struct InProcessPredictions::Metrics {
  explicit Metrics(prometheus::Registry& r)
      : seconds(prometheus::BuildHistogram()
                    .Name("llmd_epp_in_process_prediction_seconds")
                    .Help("Time to predict one request's candidates in the EPP (both models)")
                    .Register(r)
                    .Add({}, prometheus::Histogram::BucketBoundaries{5e-6, 1e-5, 2e-5, 5e-5, 1e-4,
                                                                     2e-4, 5e-4, 1e-3, 5e-3})) {}
  prometheus::Histogram& seconds;
};

InProcessPredictions::InProcessPredictions(InProcessPredictionsConfig config,
                                           prometheus::Registry& registry)
    : store_(std::make_unique<predictor::ModelStore>()),
      sync_(std::make_unique<predictor::ModelSync>(sync_config(config), *store_, registry)),
      metrics_(std::make_unique<Metrics>(registry)) {
  if (!config.model_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(config.model_dir, ec);
    sync_->load_local();
  }
  sync_->start();
  spdlog::info("predictions in process: models from {} every {} ms{}", config.trainer_url,
               config.sync_interval.count(),
               config.model_dir.empty() ? "" : ", copies in " + config.model_dir);
}

InProcessPredictions::~InProcessPredictions() = default;  // sync_ joins before store_ goes

bool InProcessPredictions::ready() const {
  return store_->current()->ready();
}

PredictionResult InProcessPredictions::predict(const std::vector<features::FeatureInput>& rows,
                                               std::chrono::steady_clock::time_point) {
  const auto models = store_->current();
  if (!models->ready()) {
    return std::nullopt;
  }
  const auto start = std::chrono::steady_clock::now();
  auto out = predict_rows(*models, rows);
  metrics_->seconds.Observe(
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return out;
}

void InProcessPredictions::predict_async(std::vector<features::FeatureInput> rows,
                                         std::chrono::steady_clock::time_point deadline,
                                         PredictionCallback done) {
  done(predict(rows, deadline));
}

}  // namespace llmd::epp::predictor_client
