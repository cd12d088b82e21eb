#pragma once
// The trainer's state and work, transport-free: ingestion into the SampleStore, the training
// thread (private boosters, fit off the request threads), publishing, evaluation history and
// persistence. routes.cc maps HTTP onto this class.
//
// Threading: request threads call add_entries/flush/status/models concurrently. `mu_` guards the
// SampleStore, the evaluation history and the counters, and is held only for short copies;
// fitting runs on the training thread without it. Published models are immutable
// (shared_ptr<const PublishedModels>) and swapped under `published_mu_`.
#include <array>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/features/feature_json.h"
#include "common/model/latency_model.h"
#include "common/util/time.h"
#include "trainer/batch_ids.h"
#include "trainer/evaluation.h"
#include "trainer/model_fitter.h"
#include "trainer/persistence.h"
#include "trainer/sample_store.h"

namespace prometheus {
class Registry;
}

namespace llmd::trainer {

struct TrainerConfig {
  double retraining_interval_sec = 10;
  std::size_t min_samples_for_retrain = 100;
  SampleStoreConfig store;
  model::Objective objective = model::Objective::kQuantile;
  double quantile_alpha = 0.9;
  bool ensemble_mode = true;
  std::size_t min_samples_for_split = 200;
  model::TrainParams params;
  std::string ttft_model_path = "models/ttft.ubj";
  std::string tpot_model_path = "models/tpot.ubj";
  std::string ttft_gated_model_path = "models/ttft_gated.bin";
  std::string tpot_gated_model_path = "models/tpot_gated.bin";
  std::string samples_path;  // empty = <dir of ttft model>/training_samples.bin
  double snapshot_interval_sec = 10;
  double default_model_ms = 10.0;
  bool linear_base = true;  // FitConfig::linear_base
  // Every acknowledged sample is in the sample log (<samples_path>.log, fsynced per request)
  // until the next snapshot holds it.
  bool durable_ingest = true;
  // Batch ids remembered for idempotent ingestion (BatchIdWindow); persisted with the samples.
  std::size_t batch_id_window = 10000;
};

struct IngestResult {
  bool duplicate = false;  // the batch id was known: nothing was ingested
};

// Published model names, in the order of /models/list.
inline constexpr std::array<const char*, 6> kModelNames = {
    "ttft", "tpot", "ttft_scaler", "tpot_scaler", "ttft_gated", "tpot_gated"};

struct ModelFile {
  std::shared_ptr<const std::string> bytes;
  int64_t version = 0;
  util::SystemTime modified;
};

struct PublishedModels {
  model::TargetPredictor ttft;
  model::TargetPredictor tpot;
  std::map<std::string, ModelFile> files;  // present files only
  int64_t version = 0;
  // Identity of this trainer's model lineage: kept across restarts that find their model files,
  // new when a trainer starts without them (its versions then start again at 1), so predictors
  // can tell "version 1 of a new lineage" from "an old version".
  std::string generation;
  std::optional<util::SystemTime> last_retrain;
  std::array<std::vector<std::pair<std::string, double>>, 2> importance;
  std::array<double, 2> intercept{};
  // Linear base coefficients per target (empty without a linear base).
  std::array<std::vector<std::pair<std::string, double>>, 2> coef;
  bool ensemble_active() const { return ttft.gated != nullptr || tpot.gated != nullptr; }
};

struct FlushResult {
  std::array<std::size_t, 2> training{};
  std::array<std::size_t, 2> test{};
  bool metrics_cleared = false;
};

struct DataStatus {
  std::array<std::size_t, 2> training{};
  std::array<std::size_t, 2> test{};
  std::array<std::size_t, 2> noqueue{};  // training samples with waiting = 0
  std::array<std::size_t, 2> queued{};
  std::array<std::array<std::size_t, kBucketCount>, 2> buckets{};
  std::array<std::size_t, 2> scores_count{};
};

class TrainerService {
 public:
  TrainerService(TrainerConfig config, prometheus::Registry& registry);
  ~TrainerService();
  TrainerService(const TrainerService&) = delete;
  TrainerService& operator=(const TrainerService&) = delete;

  const TrainerConfig& config() const { return config_; }

  void start_background();
  // Stops the threads and writes a final snapshot. Idempotent.
  void stop_background();

  // Stores the entries and, with durable ingestion, appends them to the sample log and syncs
  // it first: an entry acknowledged after this returned survives a crash. All or nothing: when
  // the log cannot be written it throws std::runtime_error (the message says why, e.g. "No space
  // left on device") and nothing was stored. A non-empty `batch_id` that was already ingested
  // is not ingested again (IngestResult::duplicate).
  IngestResult add_entries(const std::vector<features::TrainingEntry>& entries,
                           const std::string& batch_id = "");
  // Clears and, with durable ingestion, rewrites the snapshot at once (the log must not bring
  // flushed samples back after a restart).
  FlushResult flush(bool training, bool test, bool metrics);
  DataStatus data_status() const;
  std::array<std::deque<Evaluation>, 2> evaluations() const;

  std::shared_ptr<const PublishedModels> models() const;
  // One training cycle now (fits targets with new data). Returns true when something was
  // published. Used by the training thread, tests and benchmarks.
  bool train_once();
  // Writes the sample snapshot now when it changed (or `force`). Returns false on failure.
  bool snapshot(bool force = false);
  // tar.gz bundle of the model files plus metadata.json.
  std::string export_bundle() const;
  // Reference-format metric lines (appended to the prometheus-cpp exposition).
  std::string reference_metrics_text() const;
  std::string model_path(const std::string& name) const;  // "" for names we never write

 private:
  struct Metrics;
  void load_models_at_start();
  // The lineage id saved next to the model files (see PublishedModels::generation) and the
  // highest version that lineage ever published (0 when unknown).
  std::pair<std::string, int64_t> load_or_start_generation(bool models_found) const;
  // Saves (lineage, version) before `version` is published, so that a restart whose model
  // files are older (a write refused by a full disk) never serves a lower version.
  bool persist_lineage(const std::string& generation, int64_t version) const;
  void load_snapshot_at_start();
  void publish(std::shared_ptr<PublishedModels> next, const std::vector<std::string>& written,
               const std::vector<std::string>& removed);
  void training_loop();
  void snapshot_loop();
  // Writes the snapshot and empties the log; `log_mu_` held.
  bool snapshot_locked(bool force);
  void track_live_error(const std::vector<features::TrainingEntry>& entries);  // mu_ held
  std::string samples_path() const;

  TrainerConfig config_;
  std::unique_ptr<Metrics> metrics_;
  FitConfig fit_config_;

  // Lock order: log_mu_ before mu_. log_mu_ keeps the log in the store's order: an entry is
  // logged in the same critical section that stored it, and a snapshot (which empties the
  // log) cannot fall between the two.
  std::mutex log_mu_;
  std::unique_ptr<SampleLog> log_;  // guarded by log_mu_; null = not durable
  mutable std::mutex mu_;
  SampleStore store_;                            // guarded by mu_
  BatchIdWindow batch_ids_;                      // guarded by mu_
  std::array<std::deque<Evaluation>, 2> evals_;  // guarded by mu_
  uint64_t snapshot_generation_ = 0;             // guarded by mu_
  uint64_t change_counter_ = 0;                  // guarded by mu_; bumps on add and flush

  mutable std::mutex published_mu_;
  std::shared_ptr<const PublishedModels> published_;  // guarded by published_mu_
  std::mutex train_mu_;                               // one training cycle at a time
  std::array<uint64_t, 2> trained_generation_{};      // guarded by train_mu_

  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;  // guarded by stop_mu_
  std::thread training_thread_;
  std::thread snapshot_thread_;
};

}  // namespace llmd::trainer
