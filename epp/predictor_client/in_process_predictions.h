#pragma once
// InProcessPredictions: the EPP's PredictionSource without predictor replicas. It keeps the
// trainer's published models in step exactly as a predictor does (predictor::ModelSync into a
// predictor::ModelStore: poll GET /model/{name}/info, download what is new, compile it to a
// flat forest, swap the immutable snapshot) and evaluates them on the scheduling thread.
//
// Why: a predictor replica costs the EPP a coalescing window, a JSON exchange over loopback and
// two thread hand-offs per request, and costs the pod its own CPU; the forest walk itself is
// tens of microseconds for 100 candidates. In-process, a request is scheduled on the thread
// that read it, with no wait. The predictors remain the default: they are the reference
// sidecars' API, shared by EPP replicas and by the Go EPP.
//
// Threads: predict() and predict_async() run on the caller's thread (the answer is computed
// and delivered inline) and read one snapshot (shared_ptr<const ServingModels>) per call; the
// sync thread (ModelSync, started by the constructor, joined by the destructor) installs new
// snapshots. Thread-safe.
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "epp/interface/prediction_source.h"

namespace prometheus {
class Registry;
}

namespace llmd::predictor {
class ModelStore;
class ModelSync;
struct ServingModels;
}  // namespace llmd::predictor

namespace llmd::epp::predictor_client {

struct InProcessPredictionsConfig {
  std::string trainer_url;  // required: where the models come from
  std::chrono::milliseconds sync_interval{10000};
  std::chrono::milliseconds sync_timeout{5000};
  // Where to keep a copy of each model ("" = memory only): with a copy, a restarted EPP
  // predicts from it before its first sync.
  std::string model_dir;
};

// One prediction per row from `models` (the predictor's bulk path: one blocked forest walk per
// model), each row first made what a predictor accepts (wire.h, accepted_row). `models` must be
// ready(). The routing benchmark's in-process predictor serves through this too.
std::vector<Prediction> predict_rows(const predictor::ServingModels& models,
                                     std::span<const features::FeatureInput> rows);

class InProcessPredictions final : public PredictionSource {
 public:
  // Loads the copies in model_dir (if any) and starts syncing. Throws std::invalid_argument
  // for a trainer URL that is not http(s)://host:port[/base].
  InProcessPredictions(InProcessPredictionsConfig config, prometheus::Registry& registry);
  ~InProcessPredictions() override;
  InProcessPredictions(const InProcessPredictions&) = delete;
  InProcessPredictions& operator=(const InProcessPredictions&) = delete;

  // nullopt until both models are installed (the scorers then use the composite fallback).
  PredictionResult predict(const std::vector<features::FeatureInput>& rows,
                           std::chrono::steady_clock::time_point deadline) override;
  // The same, delivered inline before it returns.
  void predict_async(std::vector<features::FeatureInput> rows,
                     std::chrono::steady_clock::time_point deadline,
                     PredictionCallback done) override;

  bool ready() const;

 private:
  struct Metrics;
  std::unique_ptr<predictor::ModelStore> store_;
  std::unique_ptr<predictor::ModelSync> sync_;
  std::unique_ptr<Metrics> metrics_;
};

}  // namespace llmd::epp::predictor_client
