#pragma once
// The predicted-latency strategies' model loop, in-process and on the virtual clock:
// completed requests -> training entries (epp::training_entries, exactly what the EPP sends)
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
#include "epp/proxy/proxy_types.h"
#include "predictor/model_store.h"
#include "trainer/trainer_service.h"

namespace llmd::cluster {

class InProcessPredictor : public epp::PredictionSource {
 public:
  // `work_dir` receives the trainer's model files (must exist, private to this instance).
  explicit InProcessPredictor(const std::string& work_dir);
  ~InProcessPredictor() override;

  // epp::PredictionSource: answers from the models installed last (never times out).
  std::optional<std::vector<epp::Prediction>> predict(
      const std::vector<features::FeatureInput>& rows,
      std::chrono::steady_clock::time_point deadline) override;

  // A completed request: its training entries are buffered until the next flush().
  void on_completed(const epp::CompletedRequest& done);
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

  prometheus::Registry registry_;
  std::unique_ptr<trainer::TrainerService> trainer_;
  predictor::ModelStore store_;
  std::shared_ptr<const predictor::ServingModels> serving_;
  std::vector<features::TrainingEntry> buffer_;
  int64_t installed_version_ = -1;
};

}  // namespace llmd::cluster
