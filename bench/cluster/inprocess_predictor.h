#pragma once
// The predicted-latency strategies' model loop, in-process and on the virtual clock:
// first tokens and completed requests -> training entries (epp::first_token_entry and
// epp::completion_entries, exactly what the EPP's TrainingFeedback sends)
// -> trainer::TrainerService (flushed every virtual second like TrainingFeedback, fitted by
// train_once every retrain interval) -> the published model files compiled with the predictor's
// flat-forest path (predictor::compile_model_file into a predictor::ModelStore) -> served to the
// EPP's predicted-latency-producer through the epp::PredictionSource interface.
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <prometheus/registry.h>

#include "common/features/feature_json.h"
#include "epp/interface/prediction_source.h"
#include "epp/request/completed_request.h"
#include "predictor/model_store.h"
#include "trainer/trainer_service.h"

namespace llmd::cluster {

class InProcessPredictor : public epp::PredictionSource, public epp::CompletionSink {
 public:
  // `work_dir` receives the trainer's model files (must exist, private to this instance).
  struct FitOverrides {
    std::optional<bool> linear_base;
    std::optional<model::Objective> objective;
  };
  InProcessPredictor(const std::string& work_dir, const FitOverrides& overrides = {});
  ~InProcessPredictor() override;

  // epp::PredictionSource: answers from the models installed last (never times out).
  std::optional<std::vector<epp::Prediction>> predict(
      const std::vector<features::FeatureInput>& rows,
      std::chrono::steady_clock::time_point deadline) override;

  // epp::CompletionSink: the request's training entries are buffered until the next flush().
  void on_first_token(const epp::CompletedRequest& req) override;
  void on_completed(const epp::CompletedRequest& done) override;
  // Hands the buffered entries to the trainer (TrainingFeedback's periodic flush).
  void flush();
  struct TrainOutcome {
    bool published = false;
    int64_t version = 0;
    std::size_t ttft_samples = 0;
    std::size_t tpot_samples = 0;
    bool ensemble = false;
  };
  // TrainerService::train_once(); on a new model set, compiles and installs its files.
  TrainOutcome train();

 private:
  void install(const trainer::PublishedModels& models);
  void buffer(const nlohmann::json& entry);

  prometheus::Registry registry_;
  std::unique_ptr<trainer::TrainerService> trainer_;
  predictor::ModelStore store_;
  std::shared_ptr<const predictor::ServingModels> serving_;
  std::vector<features::TrainingEntry> buffer_;
  int64_t installed_version_ = -1;
};

}  // namespace llmd::cluster
