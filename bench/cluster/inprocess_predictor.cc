#include "bench/cluster/inprocess_predictor.h"

#include <filesystem>

#include "common/json/validation.h"
#include "epp/predictor_client/in_process_predictions.h"
#include "epp/feedback/training_feedback.h"

namespace llmd::cluster {

namespace {

trainer::TrainerConfig trainer_config(const std::string& dir,
                                      const InProcessPredictor::FitOverrides& overrides) {
  trainer::TrainerConfig c;  // the trainer's defaults: quantile p90, ensemble, 500 per bucket
  c.linear_base = overrides.linear_base.value_or(c.linear_base);
  c.durable_ingest = false;  // a scratch directory nobody restarts from
  c.objective = overrides.objective.value_or(c.objective);
  const std::filesystem::path d(dir);
  c.ttft_model_path = (d / "ttft.ubj").string();
  c.tpot_model_path = (d / "tpot.ubj").string();
  c.ttft_gated_model_path = (d / "ttft_gated.bin").string();
  c.tpot_gated_model_path = (d / "tpot_gated.bin").string();
  c.samples_path = (d / "training_samples.bin").string();
  return c;
}

}  // namespace

InProcessPredictor::InProcessPredictor(const std::string& work_dir, const FitOverrides& overrides)
    : trainer_(std::make_unique<trainer::TrainerService>(trainer_config(work_dir, overrides),
                                                         registry_)) {
  // Cold start: the trainer publishes its constant default models; the predictor serves them.
  install(*trainer_->models());
}

InProcessPredictor::~InProcessPredictor() = default;

std::optional<std::vector<epp::Prediction>> InProcessPredictor::predict(
    const std::vector<features::FeatureInput>& rows, std::chrono::steady_clock::time_point) {
  if (!serving_ || !serving_->ready()) {
    return std::nullopt;
  }
  // The predictor's bulk path, as the EPP's in-process predictions run it.
  return epp::predictor_client::predict_rows(*serving_, rows);
}

void InProcessPredictor::buffer(const nlohmann::json& j) {
  features::TrainingEntry e;
  json::Loc loc;
  json::Errors errors;
  if (features::read_training_entry(j, loc, errors, e)) {
    buffer_.push_back(e);
  }
}

void InProcessPredictor::on_first_token(const epp::CompletedRequest& req) {
  if (auto j = epp::first_token_entry(req, /*streaming_mode=*/true)) {
    buffer(*j);
  }
}

void InProcessPredictor::on_completed(const epp::CompletedRequest& done) {
  for (const auto& j : epp::completion_entries(done, /*streaming_mode=*/true)) {
    buffer(j);
  }
}

void InProcessPredictor::flush() {
  if (!buffer_.empty()) {
    trainer_->add_entries(buffer_);
    buffer_.clear();
  }
}

InProcessPredictor::TrainOutcome InProcessPredictor::train() {
  TrainOutcome out;
  out.published = trainer_->train_once();
  auto models = trainer_->models();
  if (out.published) {
    install(*models);
  }
  auto status = trainer_->data_status();
  out.version = models->version;
  out.ttft_samples = status.training[0];
  out.tpot_samples = status.training[1];
  out.ensemble = models->ensemble_active();
  return out;
}

void InProcessPredictor::install(const trainer::PublishedModels& models) {
  if (models.version == installed_version_) {
    return;
  }
  // What ModelSync does with the trainer's files: compile each published file, drop a gated
  // file the trainer no longer publishes.
  for (const char* name : predictor::kSyncedModels) {
    auto it = models.files.find(name);
    if (it == models.files.end()) {
      store_.remove(name);
      continue;
    }
    store_.install(name, predictor::compile_model_file(name, *it->second.bytes));
  }
  serving_ = store_.current();
  installed_version_ = models.version;
}

}  // namespace llmd::cluster
